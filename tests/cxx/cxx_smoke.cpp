// favor.h compiled as C++ (C++11 and later): the implementation expanded in this
// translation unit, every entry point called once, and softmax and elu+1
// attention checked against a float64 evaluation written here. Built and run by
// tests/portability.sh with g++ and clang++, scalar and AVX2.
#define FAVOR_IMPLEMENTATION
#include "favor.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

const size_t H = 2, N = 67, D = 12, DV = 7, M = 32;

int failures = 0;

void check(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "cxx_smoke: FAILED: %s\n", what);
        ++failures;
    }
}

std::vector<float> random_floats(size_t n, unsigned long long &s)
{
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    return x;
}

// out[h][i] = sum_j w(q_i, k_j) v_j / sum_j w(q_i, k_j), with w = exp(s q.k) for
// softmax and (elu(q)+1).(elu(k)+1) for elu+1; causal: j <= i.
std::vector<double> reference(const std::vector<float> &q, const std::vector<float> &k,
                              const std::vector<float> &v, bool softmax, bool causal)
{
    std::vector<double> out(H * N * DV, 0.0);
    const double s = 1.0 / std::sqrt((double)D);
    for (size_t h = 0; h < H; ++h)
        for (size_t i = 0; i < N; ++i) {
            std::vector<double> w(N, 0.0);
            double mx = -INFINITY, den = 0;
            size_t last = causal ? i + 1 : N;
            for (size_t j = 0; j < last; ++j) {
                double dot = 0;
                for (size_t c = 0; c < D; ++c) {
                    double a = q[(h * N + i) * D + c], b = k[(h * N + j) * D + c];
                    if (softmax) dot += a * b;
                    else dot += (a > 0 ? a + 1 : std::exp(a)) * (b > 0 ? b + 1 : std::exp(b));
                }
                w[j] = softmax ? s * dot : dot;
                if (w[j] > mx) mx = w[j];
            }
            for (size_t j = 0; j < last; ++j) {
                if (softmax) w[j] = std::exp(w[j] - mx);
                den += w[j];
            }
            for (size_t j = 0; j < last; ++j)
                for (size_t c = 0; c < DV; ++c)
                    out[(h * N + i) * DV + c] += w[j] / den * v[(h * N + j) * DV + c];
        }
    return out;
}

double max_err(const std::vector<float> &o, const std::vector<double> &ref)
{
    double m = 0;
    for (size_t i = 0; i < o.size(); ++i) {
        double e = std::fabs(o[i] - ref[i]);
        if (!(e <= m)) m = e;
    }
    return m;
}

} // namespace

int main()
{
    unsigned long long seed = 7;
    std::vector<float> q = random_floats(H * N * D, seed), k = random_floats(H * N * D, seed),
                       v = random_floats(H * N * DV, seed), o(H * N * DV), d1(H * N * D),
                       d2(H * N * D), d3(H * N * DV);
    favor_tensor Q = favor_tensor_packed(q.data(), H, N, D), K = favor_tensor_packed(k.data(), H, N, D),
                 V = favor_tensor_packed(v.data(), H, N, DV), O = favor_tensor_packed(o.data(), H, N, DV),
                 DQ = favor_tensor_packed(d1.data(), H, N, D), DK = favor_tensor_packed(d2.data(), H, N, D),
                 DVt = favor_tensor_packed(d3.data(), H, N, DV);
    favor_options opt = favor_default_options();
    favor_features elu, pos;
    std::vector<float> w(favor_features_floats(FAVOR_POSITIVE, D, M));
    std::printf("cxx_smoke: backend %s, %s\n", favor_backend(), favor_status_string(FAVOR_OK));
    check(favor_features_init(&elu, FAVOR_ELU1, D, D, 0, 0, NULL) == FAVOR_OK, "init elu");
    check(favor_features_init(&pos, FAVOR_POSITIVE, D, M, 0, 3, w.data()) == FAVOR_OK, "init FAVOR+");
    check(favor_features_redraw(&pos, 4) == FAVOR_OK, "redraw");
    check(favor_features_width(&pos) == M, "width");

    for (int causal = 0; causal < 2; ++causal) {
        opt.flags = causal ? FAVOR_CAUSAL : 0u;
        check(favor_softmax_attention(&Q, &K, &V, &O, &opt) == FAVOR_OK, "softmax");
        check(max_err(o, reference(q, k, v, true, causal)) <= 2e-5, "softmax accuracy");
        check(favor_softmax_attention_backward(&Q, &K, &V, &O, &O, &DQ, &DK, &DVt, &opt) == FAVOR_OK,
              "softmax backward");
        check(favor_linear_attention(&elu, &Q, &K, &V, &O, &opt) == FAVOR_OK, "elu+1");
        check(max_err(o, reference(q, k, v, false, causal)) <= 2e-5, "elu+1 accuracy");
        check(favor_linear_attention_backward(&pos, &Q, &K, &V, &O, &DQ, &DK, &DVt, &opt) == FAVOR_OK,
              "FAVOR+ backward");
        check(favor_linear_attention(&pos, &Q, &K, &V, &O, &opt) == FAVOR_OK, "FAVOR+");
    }
    check(favor_softmax_attention_workspace(&Q, &K, &V, &opt) > 0, "softmax workspace");
    check(favor_linear_attention_workspace(&pos, &Q, &K, &V, &opt) > 0, "linear workspace");
    check(favor_softmax_attention_backward_workspace(&Q, &K, &V, &opt) > 0, "softmax bwd workspace");
    check(favor_linear_attention_backward_workspace(&pos, &Q, &K, &V, &opt) > 0, "linear bwd workspace");

    // the recurrent form: extend over the first N-1 tokens, one step for the last,
    // against the causal block call just made (o holds its output)
    {
        std::vector<float> st(favor_state_floats(&pos, H, DV)), o2(H * N * DV);
        favor_state S;
        favor_tensor Qa = Q, Ka = K, Va = V, Oa = favor_tensor_packed(o2.data(), H, N, DV);
        check(favor_state_init(&S, &pos, H, DV, st.data()) == FAVOR_OK, "state init");
        Qa.rows = Ka.rows = Va.rows = Oa.rows = N - 1;
        check(favor_linear_extend_workspace(&pos, &S, &Qa, &Ka, &Va, &opt) > 0, "extend workspace");
        check(favor_linear_extend(&pos, &S, &Qa, &Ka, &Va, &Oa, &opt) == FAVOR_OK, "extend");
        Qa.data = (float *)Qa.data + (N - 1) * D; Ka.data = (float *)Ka.data + (N - 1) * D; Va.data = (float *)Va.data + (N - 1) * DV;
        Oa.data = (float *)Oa.data + (N - 1) * DV;
        Qa.rows = Ka.rows = Va.rows = Oa.rows = 1;
        check(favor_linear_step(&pos, &S, &Qa, &Ka, &Va, &Oa) == FAVOR_OK, "step");
        double e = 0, big = 0;
        for (size_t i = 0; i < o.size(); ++i) {
            if (std::fabs(o[i]) > big) big = std::fabs(o[i]);
            if (!(std::fabs(o2[i] - o[i]) <= e)) e = std::fabs(o2[i] - o[i]);
        }
        check(e <= 1e-5 * big, "extend and step agree with the block call");
        favor_state_reset(&S);
        check(S.tokens == 0, "reset");
    }
    {
        std::vector<float> phi(H * N * M);
        favor_tensor P = favor_tensor_packed(phi.data(), H, N, M);
        check(favor_feature_map(&pos, &Q, &P, FAVOR_QUERY) == FAVOR_OK, "feature map");
        check(favor_softmax_attention(&Q, &K, &V, &V, &opt) == FAVOR_E_ALIAS, "alias refused");
    }
    if (failures) return 1;
    std::printf("cxx_smoke: all checks passed\n");
    return 0;
}
