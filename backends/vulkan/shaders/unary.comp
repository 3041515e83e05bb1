// unary.comp — EMV_OP_UNARY: out[i] = act(in[i]). u: 2 in, 3 out, 4 act, 5 lo, 6 hi.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
void main() {
  uint i = gid();
  if (i >= pc.u[0]) return;
  st(pc.u[3] + i, act(ld(0u, pc.u[2] + i), pc.u[4], pf(5), pf(6)));
}
