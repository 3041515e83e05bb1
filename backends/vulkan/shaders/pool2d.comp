// pool2d.comp — EMV_OP_POOL2D, one invocation per output, NCHW. u: 2 x, 3 out, 4 H, 5 W,
// 6 OH, 7 OW, 8 KH, 9 KW, 10 sh, 11 sw, 12 ph, 13 pw, 14 dh, 15 dw, 16 kind (0 max, 1 avg),
// 17 count_include_pad, 18 divisor_override (0: none). The average's divisor follows ATen:
// the window clipped to the padded input when padding counts, else to the input.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
void main() {
  uint i = gid();
  if (i >= pc.u[0]) return;
  int H = int(pc.u[4]), W = int(pc.u[5]);
  uint OH = pc.u[6], OW = pc.u[7];
  uint ow = i % OW, t = i / OW;
  uint oh = t % OH, nc = t / OH;
  int hs = int(oh * pc.u[10]) - int(pc.u[12]), ws = int(ow * pc.u[11]) - int(pc.u[13]);
  uint x0 = pc.u[2] + nc * uint(H * W);
  if (pc.u[16] == 0u) {
    float m = uintBitsToFloat(0xff800000u); // -inf
    for (uint kh = 0u; kh < pc.u[8]; kh++) {
      int ih = hs + int(kh * pc.u[14]);
      if (ih < 0 || ih >= H) continue;
      for (uint kw = 0u; kw < pc.u[9]; kw++) {
        int iw = ws + int(kw * pc.u[15]);
        if (iw < 0 || iw >= W) continue;
        float v = ld(0u, x0 + uint(ih * W + iw));
        if (v > m || isnan(v)) m = v;
      }
    }
    st(pc.u[3] + i, m);
    return;
  }
  int he = min(hs + int(pc.u[8]), H + int(pc.u[12])), we = min(ws + int(pc.u[9]), W + int(pc.u[13]));
  int padded = (he - hs) * (we - ws);
  int h0 = max(hs, 0), w0 = max(ws, 0), h1 = min(he, H), w1 = min(we, W);
  float s = 0.0;
  for (int ih = h0; ih < h1; ih++)
    for (int iw = w0; iw < w1; iw++) s += ld(0u, x0 + uint(ih * W + iw));
  int div = pc.u[18] != 0u ? int(pc.u[18]) : pc.u[17] != 0u ? padded : (h1 - h0) * (w1 - w0);
  st(pc.u[3] + i, s / float(div));
}
