// common.glsl — what every EmberVulkanBackend compute shader shares: the delegate's arena (all
// tensors at element offsets), read and written only through ld / st, 32 words of push
// constants (u[0]: invocations that do work, u[1]: invocations per row of the 2-d dispatch,
// then the op's own words, see vk_blob.c; u[31]: the operands' storage) and the activations of
// emv_format.h (EMV_ACT_*). Compiled twice (CMakeLists.txt): every tensor f32 (binding 0, a
// float[] view of the arena), and with -DEMV_F16 mixed storage: the arena is also bound as
// float16_t[] (binding 1, GL_EXT_shader_16bit_storage) and each operand is read and written
// through the view its bit of u[31] names (bit k: in[k] is f16, k < 3; bit 3: the output is),
// halves converted to f32 on every load and rounded back on every store. All arithmetic is f32.
// ld(k, i) reads element i of the arena as operand k stores it; st writes the output.
#ifdef EMV_F16
#extension GL_EXT_shader_16bit_storage : require
#endif
layout(local_size_x = 64) in;
layout(push_constant, std430) uniform Push { uint u[32]; } pc;
layout(std430, set = 0, binding = 0) buffer Arena { float A[]; };
#ifdef EMV_F16
layout(std430, set = 0, binding = 1) buffer Arena16 { float16_t H[]; };
bool is16(uint k) { return ((pc.u[31] >> k) & 1u) != 0u; }
float ld(uint k, uint i) { return is16(k) ? float(H[i]) : A[i]; }
void st(uint i, float v) {
  if (is16(3u))
    H[i] = float16_t(v);
  else
    A[i] = v;
}
#else
float ld(uint k, uint i) { return A[i]; }
void st(uint i, float v) { A[i] = v; }
#endif

uint gid() { return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * pc.u[1]; }
float pf(uint i) { return uintBitsToFloat(pc.u[i]); }

// erfc with a relative error below 1.2e-7 (the Chebyshev fit of Press et al., Numerical
// Recipes 6.2), so gelu keeps its relative accuracy far into the negative tail.
float erfc_(float x) {
  float z = abs(x);
  float t = 1.0 / (1.0 + 0.5 * z);
  float r = t * exp(-z * z - 1.26551223 +
      t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
      t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 +
      t * 0.17087277)))))))));
  return x >= 0.0 ? r : 2.0 - r;
}

float sigmoid_(float x) { return 1.0 / (1.0 + exp(-x)); }

float tanh_(float x) {
  // small |x|: the odd series keeps the relative error; large: exp form, saturating at +-1
  float a = abs(x);
  if (a < 0.0625) {
    float x2 = x * x;
    return x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))));
  }
  float e = exp(-2.0 * min(a, 20.0));
  return sign(x) * (1.0 - e) / (1.0 + e);
}

float act(float x, uint a, float lo, float hi) {
  switch (a) {
  case 1u: return min(max(x, lo), hi);
  case 2u: return x * min(max(x + 3.0, 0.0), 6.0) / 6.0;
  case 3u: return sigmoid_(x);
  case 4u: return x * sigmoid_(x);
  case 5u: return 0.5 * x * erfc_(-x * 0.7071067811865476);
  case 6u: return 0.5 * x * (1.0 + tanh_(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  case 7u: return tanh_(x);
  case 8u: return min(max(x + 3.0, 0.0), 6.0) / 6.0;
  case 9u: return exp(x);
  case 10u: return sqrt(x);
  case 11u: return inversesqrt(x);
  case 12u: return -x;
  case 13u: return abs(x);
  default: return x;
  }
}
