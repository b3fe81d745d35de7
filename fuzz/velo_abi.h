// The part of Velo's C ABI (swift/Sources/VeloCore/CAPI) the fuzz harnesses call.
#pragma once
#include <stdint.h>
int32_t velo_model_open(const char *path, void **out);
int32_t velo_model_close(void *h);
int32_t velo_model_info(void *h, uint8_t *out, int64_t cap, int64_t *len);
int32_t velo_model_check_tensors(void *h);
int32_t velo_tokenize(void *h, const uint8_t *text, int64_t len, uint32_t flags, int32_t *out, int64_t cap, int64_t *count);
int32_t velo_detokenize(void *h, const int32_t *tokens, int64_t n, uint32_t flags, uint8_t *out, int64_t cap, int64_t *len);
int32_t velo_token_piece(void *h, int32_t token, uint8_t *out, int64_t cap, int64_t *len);
int32_t velo_engine_create(void *model, void *draft, const char *options, void **out);
int32_t velo_engine_submit(void *h, const char *request, int64_t *id);
int32_t velo_engine_cancel(void *h, int64_t id);
int32_t velo_engine_poll(void *h, uint8_t *out, int64_t cap, int64_t *len);
const char *velo_last_error(void);
