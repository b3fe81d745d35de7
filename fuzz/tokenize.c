// libFuzzer harness: arbitrary bytes (invalid UTF-8, huge runs, control-token spellings) through
// velo_tokenize of every tokenizer family we have vocabularies for, and arbitrary ids through
// velo_detokenize. The first byte picks the vocabulary and the flags. A tokenization must
// detokenize, and ids out of range must be refused, never read.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "velo_abi.h"

static const char *files[] = {
  "tiny-random-llama3-bpe.gguf", "stories260K.gguf", "llama-2-tiny-random.gguf",
  "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-bert-bge.gguf",
  "vocab/ggml-vocab-phi-3.gguf", "vocab/ggml-vocab-deepseek-coder.gguf", "vocab/ggml-vocab-falcon.gguf",
  "vocab/ggml-vocab-starcoder.gguf", "vocab/ggml-vocab-mpt.gguf", "vocab/ggml-vocab-baichuan.gguf",
};
enum { NFILES = sizeof files / sizeof files[0] };
static void *models[NFILES];
static int nmodels;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc; (void)argv;
  const char *dir = getenv("VELO_MODELS_DIR");
  if (!dir) dir = "../tests/data";
  for (int i = 0; i < NFILES; i++) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, files[i]);
    void *m = NULL;
    if (velo_model_open(p, &m) == 0) models[nmodels++] = m;
  }
  if (!nmodels) {
    fprintf(stderr, "no vocabulary opened from %s (set VELO_MODELS_DIR)\n", dir);
    abort();
  }
  return 0;
}

static int32_t ids[1 << 20];
static uint8_t out[1 << 22];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  void *m = models[data[0] % nmodels];
  uint32_t flags = (data[0] >> 4) & 3;
  data++, size--;
  int64_t n = 0, len = 0;
  if (velo_tokenize(m, data, (int64_t)size, flags, ids, 1 << 20, &n) != 0) {
    fprintf(stderr, "tokenize failed: %s\n", velo_last_error());
    abort(); // any bytes tokenize (invalid UTF-8 becomes U+FFFD)
  }
  if (n > (1 << 20)) abort();
  if (velo_detokenize(m, ids, n, 0, out, sizeof out, &len) != 0 && size < (1 << 18)) {
    fprintf(stderr, "detokenize of a tokenization failed: %s\n", velo_last_error());
    abort();
  }
  // the same bytes read as token ids: out-of-range ids must be an error, not a read
  int64_t k = (int64_t)(size / 4);
  if (k > 4096) k = 4096;
  int32_t raw[4096];
  memcpy(raw, data, (size_t)k * 4);
  velo_detokenize(m, raw, k, flags, out, sizeof out, &len);
  if (k) velo_token_piece(m, raw[0], out, sizeof out, &len);
  return 0;
}
