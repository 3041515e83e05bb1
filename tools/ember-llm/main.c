/*
 * ember-llm — generate text from an LLM .pte with the C runner (extension/llm.c).
 *
 *   ember-llm --model m.pte --tokenizer T --prompt "..." [--chat] [--max-new-tokens N]
 *             [--temperature T] [--top-p P] [--seed S] [--threads N] [--echo] [--mmap]
 *
 * The .pte is read into huge-page-backed memory by default (decode streams every weight once
 * per token, and 4 KiB pages cost it ~20 % in TLB misses); --mmap maps the file instead (faster
 * load, pages shared with other processes).
 *
 * Streams the text to stdout; statistics (prefill and decode tok/s, time to first token, peak
 * RSS) and the stop reason go to stderr.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "ember/backend_cpu.h"
#include "ember_ext/cpu_env.h"
#include "ember_ext/llm.h"

static void usage(void) {
  fprintf(stderr,
          "usage: ember-llm --model m.pte --tokenizer T --prompt TEXT [--chat]\n"
          "                 [--max-new-tokens N] [--temperature T] [--top-p P] [--seed S]\n"
          "                 [--threads N] [--echo] [--mmap]\n"
          "  T: tokenizer.json, a GGUF file, an EMTK compact file or a tiktoken rank file\n");
}

/* Strict number parsing: the whole string, within [lo, hi]; 0 on success. */
static int parse_num(const char *opt, const char *v, double lo, double hi, double *out) {
  char *end = NULL;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x >= lo && x <= hi)) {
    fprintf(stderr, "ember-llm: %s expects a number in [%g, %g], got '%s'\n", opt, lo, hi, v);
    return 1;
  }
  *out = x;
  return 0;
}

static int print_text(void *ctx, const char *text, size_t len) {
  (void)ctx;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  const char *model = NULL, *tokenizer = NULL, *prompt = NULL;
  em_llm_gen_options g = em_llm_gen_defaults();
  em_llm_options o = {1, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int takes = 1;
    if (!strcmp(a, "--model") && v)
      model = v;
    else if (!strcmp(a, "--tokenizer") && v)
      tokenizer = v;
    else if (!strcmp(a, "--prompt") && v)
      prompt = v;
    else if (!strcmp(a, "--max-new-tokens") || !strcmp(a, "--temperature") ||
             !strcmp(a, "--top-p") || !strcmp(a, "--seed") || !strcmp(a, "--threads")) {
      double x;
      int is_int = strcmp(a, "--temperature") != 0 && strcmp(a, "--top-p") != 0;
      double hi = !strcmp(a, "--top-p")     ? 1.0
                  : !strcmp(a, "--threads") ? 256.0
                  : !strcmp(a, "--seed")    ? 1e15
                                            : 1e9;
      if (!v) {
        fprintf(stderr, "ember-llm: %s needs a value\n", a);
        return 2;
      }
      if (parse_num(a, v, 0.0, hi, &x)) return 2;
      if (is_int && x != (double)(long long)x) {
        fprintf(stderr, "ember-llm: %s expects an integer, got '%s'\n", a, v);
        return 2;
      }
      if (!strcmp(a, "--max-new-tokens")) g.max_new_tokens = (int)x;
      if (!strcmp(a, "--temperature")) g.temperature = (float)x;
      if (!strcmp(a, "--top-p")) g.top_p = (float)x;
      if (!strcmp(a, "--seed")) g.seed = (uint64_t)x;
      if (!strcmp(a, "--threads")) o.n_threads = (int)x;
    } else if (!strcmp(a, "--chat"))
      g.chat = 1, takes = 0;
    else if (!strcmp(a, "--mmap"))
      o.use_mmap = 1, takes = 0;
    else if (!strcmp(a, "--echo"))
      g.echo = 1, takes = 0;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage();
      return 0;
    } else {
      fprintf(stderr, "ember-llm: unknown or incomplete argument '%s'\n", a);
      usage();
      return 2;
    }
    i += takes;
  }
  if (!model || !tokenizer || !prompt) {
    usage();
    return 2;
  }
  em_register_prim_ops();
  em_register_portable_kernels();
  em_register_quantized_kernels();
  em_register_cpu_backend();
  if (em_cpu_backend_configure_from_env() != EM_OK)
    fprintf(stderr, "warning: EMBER_CPU_ISA=%s is unknown or not on this CPU: ignored\n",
            getenv("EMBER_CPU_ISA"));
  em_llm *llm;
  em_status st = em_llm_create(model, tokenizer, &o, &llm);
  if (st != EM_OK) {
    fprintf(stderr, "ember-llm: cannot load: %s: %s\n", em_status_str(st), em_last_error());
    return 1;
  }
  em_llm_stats s;
  st = em_llm_generate(llm, prompt, &g, print_text, NULL, &s);
  printf("\n");
  fflush(stdout);
  if (st != EM_OK) {
    fprintf(stderr, "ember-llm: generation failed: %s: %s\n", em_status_str(st), em_last_error());
    em_llm_destroy(llm);
    return 1;
  }
  const char *why = s.stop == EM_LLM_STOP_EOS          ? "end-of-sequence token"
                    : s.stop == EM_LLM_STOP_CONTEXT    ? "context limit reached"
                    : s.stop == EM_LLM_STOP_MAX_TOKENS ? "max new tokens reached"
                                                       : "stopped by caller";
  fprintf(stderr, "[stopped: %s (%zu prompt + %zu generated tokens, max_seq_len %lld)]\n", why,
          s.n_prompt_tokens, s.n_generated, (long long)em_llm_max_seq_len(llm));
  fprintf(stderr,
          "load %.3f s | prefill %zu tok in %.3f s (%.1f tok/s) | time to first token %.3f s | "
          "decode %.1f tok/s | peak RSS %.1f MiB | threads %d\n",
          s.load_s, s.n_prompt_tokens, s.prefill_s, s.prefill_tok_per_s, s.ttft_s,
          s.decode_tok_per_s, (double)s.peak_rss_kb / 1024.0, o.n_threads);
  em_llm_destroy(llm);
  return 0;
}
