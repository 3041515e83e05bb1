// softmax.comp — EMV_OP_SOFTMAX, one invocation per row. u: 2 x, 3 out, 4 cols, 5 log.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
void main() {
  uint r = gid();
  if (r >= pc.u[0]) return;
  uint cols = pc.u[4], x0 = pc.u[2] + r * cols, y0 = pc.u[3] + r * cols;
  float m = uintBitsToFloat(0xff800000u);
  for (uint c = 0u; c < cols; c++) m = max(m, ld(0u, x0 + c));
  float s = 0.0;
  for (uint c = 0u; c < cols; c++) s += exp(ld(0u, x0 + c) - m);
  if (pc.u[5] != 0u) {
    float l = log(s);
    for (uint c = 0u; c < cols; c++) st(y0 + c, ld(0u, x0 + c) - m - l);
  } else {
    float inv = 1.0 / s;
    for (uint c = 0u; c < cols; c++) st(y0 + c, exp(ld(0u, x0 + c) - m) * inv);
  }
}
