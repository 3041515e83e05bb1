// gather.comp — copies, permutes, slices and concatenation pieces: element i of a 4-d index
// space [u6..u9] reads x + sum(k_d * u[10 + d]) and writes out + sum(k_d * u[14 + d]).
// u: 2 x, 3 out.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
void main() {
  uint i = gid();
  if (i >= pc.u[0]) return;
  uint r = i, s = pc.u[2], o = pc.u[3];
  for (int d = 3; d >= 0; d--) {
    uint n = pc.u[6 + d];
    uint k = r % n;
    r /= n;
    s += k * pc.u[10 + d];
    o += k * pc.u[14 + d];
  }
  st(o, ld(0u, s));
}
