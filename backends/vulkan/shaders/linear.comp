// linear.comp — EMV_OP_LINEAR, one invocation per output: out[b,m,n] = act(sum_k x[b,m,k] *
// w[.,k,n] + bias[n]). u: 2 x, 3 w, 4 bias, 5 has_bias, 6 out, 7 M, 8 K, 9 N, 10 trans_w
// (w is [N,K]), 11 w batch stride (0: shared), 12 act, 13 lo, 14 hi.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
void main() {
  uint i = gid();
  if (i >= pc.u[0]) return;
  uint M = pc.u[7], K = pc.u[8], N = pc.u[9];
  uint n = i % N, bm = i / N, b = bm / M;
  uint x0 = pc.u[2] + bm * K, w0 = pc.u[3] + b * pc.u[11];
  float s = 0.0;
  if (pc.u[10] != 0u) {
    uint wr = w0 + n * K;
    for (uint k = 0u; k < K; k++) s += ld(0u, x0 + k) * ld(1u, wr + k);
  } else {
    for (uint k = 0u; k < K; k++) s += ld(0u, x0 + k) * ld(1u, w0 + k * N + n);
  }
  if (pc.u[5] != 0u) s += ld(2u, pc.u[4] + n);
  st(pc.u[6] + i, act(s, pc.u[12], pf(13), pf(14)));
}
