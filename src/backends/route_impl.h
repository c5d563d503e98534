#pragma once
// MoE routing of one token from its router logits, written once for the host
// (models/moe.cpp) and the GPU backend (backends/gpu/moe.cu): plain loops, no
// library calls a device cannot make. The algorithm (docs/architectures.md):
//   sigmoid: s = sigmoid(logit); choice = s + bias; with n_group > 1 only the
//     topk_group groups with the largest sum of their two best choices stay
//     (ties to the lower group); the others are masked to -inf;
//   softmax: s = choice = softmax(logits) (sum in double);
// then the k largest choices (ties to the lower expert id), written in
// ascending expert order; weights = s (renormalised over the k when norm_topk)
// times scaling.
#include <cmath>
#include <cstdint>

#include "core/float_formats.h"  // MX_HD

namespace mx {

constexpr int kMaxRouteExperts = 1024;

// bias: null or f32 [E]. Scratch is on the caller's stack (no allocation in the
// decode loop). Returns nothing; idx/w receive k entries.
MX_HD inline void route_token(const float* logits, int E, int k, bool sigmoid, const float* bias,
                              int n_group, int topk_group, bool norm_topk, float scaling,
                              int32_t* idx, float* w) {
  float score[kMaxRouteExperts], choice[kMaxRouteExperts];
  if (sigmoid) {
    for (int e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + expf(-logits[e]));
      choice[e] = score[e] + (bias ? bias[e] : 0.0f);
    }
    if (n_group > 1) {
      const int per = E / n_group;
      float gscore[kMaxRouteExperts];
      bool keep[kMaxRouteExperts];
      for (int g = 0; g < n_group; ++g) {
        const float* c = choice + g * per;
        float a = -INFINITY, b = -INFINITY;  // two largest
        for (int i = 0; i < per; ++i) {
          if (c[i] > a) b = a, a = c[i];
          else if (c[i] > b) b = c[i];
        }
        gscore[g] = per >= 2 ? a + b : a;
        keep[g] = false;
      }
      for (int i = 0; i < topk_group; ++i) {  // the best remaining group, lower index on ties
        int best = -1;
        for (int g = 0; g < n_group; ++g)
          if (!keep[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
        keep[best] = true;
      }
      for (int e = 0; e < E; ++e)
        if (!keep[e / per]) choice[e] = -INFINITY;
    }
  } else {
    float mx = logits[0];
    for (int e = 1; e < E; ++e) mx = logits[e] > mx ? logits[e] : mx;
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += (score[e] = expf(logits[e] - mx));
    for (int e = 0; e < E; ++e) choice[e] = score[e] = float(score[e] / sum);
  }
  // NaN router logits (a NaN in the weights or the activations) must still
  // give k valid expert ids: a NaN choice ranks below every number. The
  // output is then NaN, and the engine fails that request with an error.
  for (int e = 0; e < E; ++e)
    if (choice[e] != choice[e]) choice[e] = -INFINITY;
  // Top-k by choice (ties to the lower id): k selection passes over the experts not taken.
  bool taken[kMaxRouteExperts];
  for (int e = 0; e < E; ++e) taken[e] = false;
  for (int i = 0; i < k; ++i) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (!taken[e] && (best < 0 || choice[e] > choice[best])) best = e;
    idx[i] = best;
    taken[best] = true;
  }
  for (int i = 1; i < k; ++i)  // ascending ids: the fixed combine order
    for (int j = i; j > 0 && idx[j - 1] > idx[j]; --j) {
      const int32_t t = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = t;
    }
  double total = 0;
  for (int i = 0; i < k; ++i) total += score[idx[i]];
  for (int i = 0; i < k; ++i) {
    double v = score[idx[i]];
    if (norm_topk) v /= sigmoid ? total + 1e-20 : total;
    w[i] = float(v * scaling);
  }
}

}  // namespace mx
