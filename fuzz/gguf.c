// libFuzzer harness: a GGUF file from arbitrary bytes through velo_model_open, then whatever a
// client does with an opened model (info, the tensor check, tokenize, detokenize, pieces). Errors are fine; a
// crash, a hang or a sanitizer report is a bug.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "velo_abi.h"

static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc; (void)argv;
  snprintf(path, sizeof path, "/tmp/velo-fuzz-gguf-%d.gguf", (int)getpid());
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  fwrite(data, 1, size, f);
  fclose(f);
  void *m = NULL;
  if (velo_model_open(path, &m) == 0 && m) {
    static uint8_t buf[1 << 16];
    int64_t len = 0;
    velo_model_info(m, buf, sizeof buf, &len);
    velo_model_check_tensors(m); // every tensor's values read, dequantized
    int32_t ids[256];
    int64_t n = 0;
    const char *text = "Hello world <|eot_id|> \xff\xfe caf\xc3\xa9";
    if (velo_tokenize(m, (const uint8_t *)text, (int64_t)strlen(text), 3, ids, 256, &n) == 0 && n <= 256) {
      velo_detokenize(m, ids, n, 2, buf, sizeof buf, &len);
      for (int64_t i = 0; i < n; i++) velo_token_piece(m, ids[i], buf, sizeof buf, &len);
    }
    for (int32_t t = -2; t < 8; t++) velo_token_piece(m, t, buf, sizeof buf, &len);
    velo_model_close(m);
  }
  return 0;
}
