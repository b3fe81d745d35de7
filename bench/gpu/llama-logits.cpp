// llama-logits — llama.cpp's logits on its GPU backend for coopmat-check.ts's prompt, so the
// reference's own rounding sits in the same table as Velo's paths (bench/gpu/pack-llamacpp.sh
// builds it beside llama-bench; bench/gpu/h100.sh coopmat runs it where it is packed).
//   llama-logits MODEL.gguf IDS_FILE TOP
// Prefills the token ids of IDS_FILE (whitespace-separated) in one batch, with every layer on
// the GPU and flash attention on (as llama-bench -fa 1), and prints {"top": [[id, logit], ...]}:
// the last row's TOP largest logits, largest first.
#include "ggml-backend.h"
#include "llama.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

int main(int argc, char ** argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: llama-logits MODEL.gguf IDS_FILE TOP\n");
        return 2;
    }
    std::vector<llama_token> prompt;
    std::ifstream ids_in(argv[2]);
    for (llama_token t; ids_in >> t;) prompt.push_back(t);
    const int n = (int)prompt.size(), top = atoi(argv[3]);
    if (n == 0) {
        fprintf(stderr, "llama-logits: no token ids in %s\n", argv[2]);
        return 2;
    }
    if (!getenv("LLAMA_LOGITS_VERBOSE")) llama_log_set(quiet, nullptr);
    ggml_backend_load_all();
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 999;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llama-logits: cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n + 16;
    cp.n_batch = n;
    cp.n_ubatch = n;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama-logits: cannot make a context\n");
        return 1;
    }
    if (llama_decode(ctx, llama_batch_get_one(prompt.data(), n)) != 0) {
        fprintf(stderr, "llama-logits: decode failed\n");
        return 1;
    }
    // the devices it ran on, so a table never shows a CPU run as the GPU's
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) fprintf(stderr, "llama-logits: device %s\n", ggml_backend_dev_description(ggml_backend_dev_get(i)));
    const float * logits = llama_get_logits_ith(ctx, -1);
    const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::vector<int> ids(vocab);
    for (int i = 0; i < vocab; i++) ids[i] = i;
    const int k = std::min(top, vocab);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    printf("{\"top\": [");
    for (int i = 0; i < k; i++) printf("%s[%d, %.6g]", i ? ", " : "", ids[i], logits[ids[i]]);
    printf("]}\n");
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
