// libFuzzer harness: arbitrary text as a GBNF grammar through velo_engine_submit (the grammar
// compiler runs at submit; a bad grammar is an invalid-argument error). A grammar that compiles
// is cancelled at once; events are drained so nothing piles up.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "velo_abi.h"

static void *engine;
static char *req;
static uint8_t events[1 << 16];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc; (void)argv;
  const char *dir = getenv("VELO_MODELS_DIR");
  if (!dir) dir = "../tests/data";
  char p[1024];
  snprintf(p, sizeof p, "%s/stories260K.gguf", dir);
  void *m = NULL;
  if (velo_model_open(p, &m) != 0) {
    fprintf(stderr, "cannot open %s: %s (set VELO_MODELS_DIR)\n", p, velo_last_error());
    abort();
  }
  if (velo_engine_create(m, NULL, "{\"threads\":1,\"ctx_size\":64,\"max_batch_size\":1,\"backend\":\"cpu\"}", &engine) != 0) {
    fprintf(stderr, "engine: %s\n", velo_last_error());
    abort();
  }
  req = malloc(64 + 6 * (1 << 20));
  // the harness is only worth running if a good grammar gets through and a bad one does not
  int64_t id = 0;
  if (velo_engine_submit(engine, "{\"prompt_tokens\":[1],\"max_tokens\":1,\"grammar\":\"root ::= \\\"a\\\"\"}", &id) != 0) {
    fprintf(stderr, "a good grammar was refused: %s\n", velo_last_error());
    abort();
  }
  velo_engine_cancel(engine, id);
  if (velo_engine_submit(engine, "{\"prompt_tokens\":[1],\"max_tokens\":1,\"grammar\":\"root ::= (\"}", &id) == 0) {
    fprintf(stderr, "a bad grammar was accepted\n");
    abort();
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1 << 20)) return 0;
  // the bytes as a JSON string (every byte escaped that JSON needs escaped)
  char *w = req + sprintf(req, "{\"prompt_tokens\":[1],\"max_tokens\":1,\"temperature\":0,\"grammar\":\"");
  for (size_t i = 0; i < size; i++) {
    uint8_t c = data[i];
    if (c == '"' || c == '\\') *w++ = '\\', *w++ = (char)c;
    else if (c < 0x20) w += sprintf(w, "\\u%04x", c);
    else *w++ = (char)c;
  }
  strcpy(w, "\"}");
  int64_t id = 0, len = 0;
  if (velo_engine_submit(engine, req, &id) == 0) {
    velo_engine_cancel(engine, id);
  }
  while (velo_engine_poll(engine, events, sizeof events, &len) == 0 && len > 0) {}
  return 0;
}
