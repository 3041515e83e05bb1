// mean.comp — EMV_OP_MEAN: out[o, i] = mean (or sum) over c of x[o, c, i]. u: 2 x, 3 out,
// 4 cols, 5 inner, 6 sum.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
void main() {
  uint j = gid();
  if (j >= pc.u[0]) return;
  uint cols = pc.u[4], inner = pc.u[5];
  uint o = j / inner, in_ = j % inner;
  uint x0 = pc.u[2] + o * cols * inner + in_;
  float s = 0.0;
  for (uint c = 0u; c < cols; c++) s += ld(0u, x0 + c * inner);
  st(pc.u[3] + j, pc.u[6] != 0u ? s : s / float(cols));
}
