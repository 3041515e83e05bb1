// binary.comp — EMV_OP_BINARY with numpy broadcasting over 4-d: u: 2 a, 3 b, 4 out, 5 op,
// 6..9 out sizes, 10..13 a strides, 14..17 b strides (0 along a broadcast dim).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
void main() {
  uint i = gid();
  if (i >= pc.u[0]) return;
  uint r = i, ia = 0u, ib = 0u;
  for (int d = 3; d >= 0; d--) {
    uint n = pc.u[6 + d];
    uint k = r % n;
    r /= n;
    ia += k * pc.u[10 + d];
    ib += k * pc.u[14 + d];
  }
  float a = ld(0u, pc.u[2] + ia), b = ld(1u, pc.u[3] + ib), y;
  switch (pc.u[5]) {
  case 0u: y = a + b; break;
  case 1u: y = a - b; break;
  case 2u: y = a * b; break;
  case 3u: y = a / b; break;
  default: y = b - a; break;
  }
  st(pc.u[4] + i, y);
}
