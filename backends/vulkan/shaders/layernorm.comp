// layernorm.comp — EMV_OP_LAYERNORM, one invocation per row (two passes: mean, then variance).
// u: 2 x, 3 w, 4 b, 5 flags (1: w, 2: b), 6 out, 7 cols, 8 eps.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
void main() {
  uint r = gid();
  if (r >= pc.u[0]) return;
  uint cols = pc.u[7], x0 = pc.u[2] + r * cols, y0 = pc.u[6] + r * cols;
  float s = 0.0;
  for (uint c = 0u; c < cols; c++) s += ld(0u, x0 + c);
  float mean = s / float(cols), v = 0.0;
  for (uint c = 0u; c < cols; c++) {
    float d = ld(0u, x0 + c) - mean;
    v += d * d;
  }
  float rs = inversesqrt(v / float(cols) + pf(8));
  for (uint c = 0u; c < cols; c++) {
    float y = (ld(0u, x0 + c) - mean) * rs;
    if ((pc.u[5] & 1u) != 0u) y *= ld(1u, pc.u[3] + c);
    if ((pc.u[5] & 2u) != 0u) y += ld(2u, pc.u[4] + c);
    st(y0 + c, y);
  }
}
