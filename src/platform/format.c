/*
 * format.c — a small vsnprintf for log messages, so bare-metal builds need no
 * stdio (newlib's printf family costs ~30 KB of flash).
 *
 * Supports flags '-' and '0', a width, a precision ('.N' or '.*'), the length
 * modifiers hh h l ll z j t, and the conversions d i u x X c s p g f e %.
 * Floating point is printed to ~9 significant digits (enough for messages,
 * not a general printf). Always NUL-terminates; returns the length written.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/platform.h"

typedef struct out_buf {
  char *p;
  size_t n, len;
} out_buf;

static void put(out_buf *o, char c) {
  if (o->len + 1 < o->n) o->p[o->len] = c;
  o->len++;
}

static void put_padded(out_buf *o, const char *s, size_t n, int width, int left, char pad) {
  int fill = width > (int)n ? width - (int)n : 0;
  if (!left && pad == '0' && n && (s[0] == '-' || s[0] == '+')) {
    put(o, *s++);
    n--;
  }
  if (!left)
    while (fill-- > 0) put(o, pad);
  for (size_t i = 0; i < n; i++) put(o, s[i]);
  if (left)
    while (fill-- > 0) put(o, ' ');
}

static size_t utoa(uint64_t v, unsigned base, int upper, char *buf) {
  const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = digits[v % base];
    v /= base;
  } while (v);
  for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
  return n;
}

/* %g-like: 6 significant digits, fixed or scientific, trailing zeros removed. */
static size_t ftoa(double v, char conv, char *buf) {
  size_t n = 0;
  if (v != v) return (size_t)(buf[0] = 'n', buf[1] = 'a', buf[2] = 'n', 3);
  if (v < 0) {
    buf[n++] = '-';
    v = -v;
  }
  if (v > 1.7976931348623157e308)
    return n + (size_t)(buf[n] = 'i', buf[n + 1] = 'n', buf[n + 2] = 'f', 3);
  int exp10 = 0;
  if (v != 0.0) {
    while (v >= 10.0) v /= 10.0, exp10++;
    while (v < 1.0) v *= 10.0, exp10--;
  }
  int sci = conv == 'e' || (conv == 'g' && (exp10 < -4 || exp10 >= 6));
  if (!sci) {
    for (int i = 0; i < exp10; i++) v *= 10.0;
    for (int i = 0; i > exp10; i--) v /= 10.0;
  }
  int frac_digits = sci ? 5 : (conv == 'f' ? 6 : (5 - exp10 > 0 ? 5 - exp10 : 0));
  if (frac_digits > 9) frac_digits = 9;
  double scale = 1.0;
  for (int i = 0; i < frac_digits; i++) scale *= 10.0;
  double r = v * scale + 0.5;
  uint64_t whole = (uint64_t)(r / scale);
  uint64_t frac = (uint64_t)(r - (double)whole * scale);
  n += utoa(whole, 10, 0, buf + n);
  if (frac_digits) {
    char f[16];
    size_t fl = utoa(frac, 10, 0, f);
    size_t start = n;
    buf[n++] = '.';
    for (size_t i = fl; i < (size_t)frac_digits; i++) buf[n++] = '0';
    for (size_t i = 0; i < fl; i++) buf[n++] = f[i];
    if (conv == 'g') {
      while (buf[n - 1] == '0') n--;
      if (n - 1 == start) n--;
    }
  }
  if (sci) {
    buf[n++] = 'e';
    buf[n++] = exp10 < 0 ? '-' : '+';
    unsigned e = (unsigned)(exp10 < 0 ? -exp10 : exp10);
    if (e < 10) buf[n++] = '0';
    n += utoa(e, 10, 0, buf + n);
  }
  return n;
}

size_t em_vformat(char *dst, size_t cap, const char *fmt, va_list ap) {
  out_buf o = {dst, cap, 0};
  for (const char *f = fmt; *f; f++) {
    if (*f != '%') {
      put(&o, *f);
      continue;
    }
    f++;
    int left = 0, width = 0, prec = -1;
    char pad = ' ';
    for (;; f++) {
      if (*f == '-')
        left = 1;
      else if (*f == '0')
        pad = '0';
      else if (*f == '+' || *f == ' ' || *f == '#')
        continue;
      else
        break;
    }
    while (*f >= '0' && *f <= '9') width = width * 10 + (*f++ - '0');
    if (*f == '.') {
      f++;
      prec = 0;
      if (*f == '*') {
        prec = va_arg(ap, int);
        f++;
      } else {
        while (*f >= '0' && *f <= '9') prec = prec * 10 + (*f++ - '0');
      }
    }
    int lng = 0; /* 0 int, 1 long, 2 long long, 3 size_t */
    while (*f == 'l' || *f == 'h' || *f == 'z' || *f == 'j' || *f == 't') {
      if (*f == 'l')
        lng++;
      else if (*f == 'z' || *f == 't')
        lng = 3;
      else if (*f == 'j')
        lng = 2;
      f++;
    }
    char buf[64];
    size_t n = 0;
    switch (*f) {
    case 'd':
    case 'i': {
      int64_t v = lng == 2   ? va_arg(ap, long long)
                  : lng == 1 ? va_arg(ap, long)
                  : lng == 3 ? (int64_t)va_arg(ap, ptrdiff_t)
                             : va_arg(ap, int);
      uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
      if (v < 0) buf[n++] = '-';
      n += utoa(u, 10, 0, buf + n);
      break;
    }
    case 'u':
    case 'x':
    case 'X': {
      uint64_t v = lng == 2   ? va_arg(ap, unsigned long long)
                   : lng == 1 ? va_arg(ap, unsigned long)
                   : lng == 3 ? (uint64_t)va_arg(ap, size_t)
                              : va_arg(ap, unsigned);
      n = utoa(v, *f == 'u' ? 10 : 16, *f == 'X', buf);
      break;
    }
    case 'p':
      buf[0] = '0', buf[1] = 'x';
      n = 2 + utoa((uint64_t)(uintptr_t)va_arg(ap, void *), 16, 0, buf + 2);
      break;
    case 'c': buf[n++] = (char)va_arg(ap, int); break;
    case 'g':
    case 'f':
    case 'e': n = ftoa(va_arg(ap, double), *f, buf); break;
    case 's': {
      const char *s = va_arg(ap, const char *);
      if (!s) s = "(null)";
      size_t len = 0;
      while ((prec < 0 || len < (size_t)prec) && s[len]) len++;
      put_padded(&o, s, len, width, left, ' ');
      continue;
    }
    case '%': buf[n++] = '%'; break;
    default:
      if (!*f) f--;
      continue;
    }
    put_padded(&o, buf, n, width, left, pad);
  }
  if (cap) dst[o.len < cap ? o.len : cap - 1] = '\0';
  return o.len;
}
