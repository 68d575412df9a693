/* secgpt's stand-in for miniaudio.h, which Ollama's multimodal helper
   (llama.cpp's tools/mtmd) includes and which Go module downloads leave
   out with every vendor directory. The test server decodes no audio: each
   decoder call fails, so an audio input is refused. Only the declarations
   mtmd-helper.cpp uses are here. */
#ifndef SECGPT_MINIAUDIO_STANDIN_H
#define SECGPT_MINIAUDIO_STANDIN_H
#include <stddef.h>
#include <stdint.h>
typedef int ma_result;
typedef uint32_t ma_uint32;
typedef uint64_t ma_uint64;
typedef enum { ma_format_f32 = 5 } ma_format;
#define MA_SUCCESS 0
#define MA_NOT_IMPLEMENTED (-29)
typedef struct { ma_format format; ma_uint32 channels, sampleRate; } ma_decoder_config;
typedef struct { int unused; } ma_decoder;
static ma_decoder_config ma_decoder_config_init(ma_format f, ma_uint32 c, ma_uint32 r) { ma_decoder_config cfg = {f, c, r}; return cfg; }
static ma_result ma_decoder_init_memory(const void *d, size_t n, const ma_decoder_config *c, ma_decoder *o) { (void)d; (void)n; (void)c; (void)o; return MA_NOT_IMPLEMENTED; }
static ma_result ma_decoder_get_length_in_pcm_frames(ma_decoder *d, ma_uint64 *n) { (void)d; *n = 0; return MA_NOT_IMPLEMENTED; }
static ma_result ma_decoder_read_pcm_frames(ma_decoder *d, void *o, ma_uint64 n, ma_uint64 *r) { (void)d; (void)o; (void)n; *r = 0; return MA_NOT_IMPLEMENTED; }
static ma_result ma_decoder_uninit(ma_decoder *d) { (void)d; return MA_SUCCESS; }
#endif
