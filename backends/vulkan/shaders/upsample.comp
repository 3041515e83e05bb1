// upsample.comp — EMV_OP_UPSAMPLE, one invocation per output, NCHW. u: 2 x, 3 out, 4 H, 5 W,
// 6 OH, 7 OW, 8 mode (0 nearest, 1 bilinear), 9 align_corners, 10 / 11 the f32 source scale of
// H / W (computed by the exporter as the portable kernels do, kernels/portable/nn_sample.c).
// Source indices are clamped to the input, so no scale can make a read leave it.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

// nearest: identity and exact doubling as ATen special-cases them, else floor(o * s)
uint nearest(uint o, uint n, uint on, float s) {
  if (on == n) return o;
  if (on == 2u * n) return o >> 1;
  precise float r = float(o) * s;
  return min(uint(max(floor(r), 0.0)), n - 1u);
}

// bilinear: the first tap and the weight of the second
uint tap(uint o, uint n, float s, bool align, out float l1) {
  precise float r = align ? s * float(o) : s * (float(o) + 0.5) - 0.5;
  r = max(r, 0.0);
  uint i0 = min(uint(r), n - 1u);
  l1 = min(r - float(i0), 1.0);
  return i0;
}

void main() {
  uint i = gid();
  if (i >= pc.u[0]) return;
  uint H = pc.u[4], W = pc.u[5], OH = pc.u[6], OW = pc.u[7];
  uint ow = i % OW, t = i / OW;
  uint oh = t % OH, nc = t / OH;
  uint x0 = pc.u[2] + nc * H * W;
  float sh = pf(10u), sw = pf(11u);
  if (pc.u[8] == 0u) {
    st(pc.u[3] + i, ld(0u, x0 + nearest(oh, H, OH, sh) * W + nearest(ow, W, OW, sw)));
    return;
  }
  bool align = pc.u[9] != 0u;
  float lh, lw;
  uint h0 = tap(oh, H, sh, align, lh), w0 = tap(ow, W, sw, align, lw);
  uint h1 = h0 + (h0 < H - 1u ? 1u : 0u), w1 = w0 + (w0 < W - 1u ? 1u : 0u);
  float v00 = ld(0u, x0 + h0 * W + w0), v01 = ld(0u, x0 + h0 * W + w1);
  float v10 = ld(0u, x0 + h1 * W + w0), v11 = ld(0u, x0 + h1 * W + w1);
  st(pc.u[3] + i, (1.0 - lh) * ((1.0 - lw) * v00 + lw * v01) + lh * ((1.0 - lw) * v10 + lw * v11));
}
