// conv2d.comp — EMV_OP_CONV2D, one invocation per output, NCHW. u: 2 x, 3 w, 4 bias,
// 5 has_bias, 6 out, 7 N, 8 C, 9 H, 10 W, 11 OC, 12 OH, 13 OW, 14 KH, 15 KW, 16 sh, 17 sw,
// 18 ph, 19 pw, 20 dh, 21 dw, 22 groups, 23 act, 24 lo, 25 hi.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
void main() {
  uint i = gid();
  if (i >= pc.u[0]) return;
  uint C = pc.u[8], H = pc.u[9], W = pc.u[10], OC = pc.u[11], OH = pc.u[12], OW = pc.u[13];
  uint KH = pc.u[14], KW = pc.u[15];
  uint ow = i % OW, t = i / OW;
  uint oh = t % OH;
  t /= OH;
  uint oc = t % OC, n = t / OC;
  uint cg = C / pc.u[22], ocg = OC / pc.u[22];
  uint c0 = (oc / ocg) * cg;
  int ih0 = int(oh * pc.u[16]) - int(pc.u[18]);
  int iw0 = int(ow * pc.u[17]) - int(pc.u[19]);
  float s = pc.u[5] != 0u ? ld(2u, pc.u[4] + oc) : 0.0;
  for (uint c = 0u; c < cg; c++) {
    uint xc = pc.u[2] + (n * C + c0 + c) * H * W;
    uint wc = pc.u[3] + (oc * cg + c) * KH * KW;
    for (uint kh = 0u; kh < KH; kh++) {
      int ih = ih0 + int(kh * pc.u[20]);
      if (ih < 0 || ih >= int(H)) continue;
      for (uint kw = 0u; kw < KW; kw++) {
        int iw = iw0 + int(kw * pc.u[21]);
        if (iw < 0 || iw >= int(W)) continue;
        s += ld(0u, xc + uint(ih) * W + uint(iw)) * ld(1u, wc + kh * KW + kw);
      }
    }
  }
  st(pc.u[6] + i, act(s, pc.u[23], pf(24), pf(25)));
}
