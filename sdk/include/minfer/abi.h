/* minfer/abi.h — the backend plugin ABI (plain C). docs/PLUGIN-ABI.md explains every entry.
 *
 * Rules: every struct that crosses starts with struct_size and only ever grows at the end;
 * abi_major must match exactly; abi_minor says which appended fields/entries exist.
 * Nothing is thrown across: every fallible call returns a status (NULL = success) that the
 * caller frees with the plugin's status_free. Handles are opaque and owned by the plugin. */
#ifndef MINFER_ABI_H
#define MINFER_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "minfer/dtype.h"
#include "minfer/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MINFER_ABI_MAJOR 1 /* changes only when something is removed, reordered or retyped */
#define MINFER_ABI_MINOR 11 /* grows when a field or an entry is appended */

/* The one symbol a plugin exports. */
#define MINFER_ENTRY_SYMBOL "minfer_backend_entry"

#if defined(_WIN32)
#define MINFER_EXPORT __declspec(dllexport)
#else
#define MINFER_EXPORT __attribute__((visibility("default")))
#endif

/* Size of struct T up to and including field F: what a side that knows F must see in struct_size. */
#define MINFER_SIZE_UP_TO(T, F) (offsetof(T, F) + sizeof(((T *)0)->F))

typedef enum minfer_status_code {
  MINFER_OK = 0,
  MINFER_ERR_INVALID_ARGUMENT = 1, /* bad input from the host: sizes, shapes, options */
  MINFER_ERR_UNSUPPORTED = 2,      /* a node or dtype this backend cannot run */
  MINFER_ERR_OUT_OF_MEMORY = 3,    /* host or device allocation failed */
  MINFER_ERR_DEVICE = 4,           /* the device or its driver reported an error */
  MINFER_ERR_NOT_FOUND = 5,        /* no such device */
  MINFER_ERR_INTERNAL = 6          /* a bug in the plugin */
} minfer_status_code;

typedef enum minfer_log_level {
  MINFER_LOG_TRACE = 0,
  MINFER_LOG_DEBUG = 1,
  MINFER_LOG_INFO = 2,
  MINFER_LOG_WARN = 3,
  MINFER_LOG_ERROR = 4
} minfer_log_level;

typedef struct minfer_status minfer_status;   /* made by the plugin, freed by status_free */
typedef struct minfer_backend minfer_backend; /* one opened device */
typedef struct minfer_buffer minfer_buffer;   /* memory owned by the plugin */
typedef struct minfer_segment minfer_segment; /* a compiled run of nodes */
typedef struct minfer_group minfer_group;     /* ABI 1.8: ranks for collectives (tensor parallelism) */

/* What the host gives the plugin at open. Lifetime: until close. */
typedef struct minfer_host {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  void *user; /* passed back unchanged to log */
  /* Thread-safe. message lifetime: the call. May be NULL (then the plugin stays silent). */
  void (*log)(void *user, int32_t level, const char *message);
} minfer_host;

typedef struct minfer_device_info {
  size_t struct_size;        /* in: set by the host to its sizeof */
  char name[128];            /* out: "NVIDIA H200", NUL-terminated */
  uint64_t total_bytes;      /* out: memory the device has (0 if not meaningful) */
  uint64_t free_bytes;       /* out: memory free now (0 if not meaningful) */
} minfer_device_info;

/* A tensor as a plugin sees it: plain values, never a core object.
 * shape is innermost-first (shape[0] = row length); unused dims are 1.
 * stride_bytes[d] is the distance between consecutive indices of dim d; for block types
 * stride_bytes[0] is 0 (single values are not addressable) and rows hold whole blocks.
 * token_dim: -1 for a tensor of fixed shape; else the dim whose extent at run time is the
 * step's n_tokens (shape[token_dim] is the compiled maximum). A reader whose struct_size
 * does not reach token_dim treats it as -1.
 * flags (ABI 1.2; 0 where struct_size does not reach it): MINFER_TENSOR_* bits. */
/* The node output is read only by later nodes of the segment being compiled — not by another
 * segment, a copy or the host — so a plugin that fuses its producer into those nodes may
 * leave it unwritten. Without the bit a plugin must write every output. */
#define MINFER_TENSOR_SEGMENT_LOCAL 1u
/* ABI 1.5: the tensor's token_dim follows the step's n_outputs (the rows that produce logits),
 * not its n_tokens. */
#define MINFER_TENSOR_OUTPUT_ROWS 2u
typedef struct minfer_tensor {
  size_t struct_size;
  int32_t dtype; /* minfer_dtype == GGUF type id */
  int32_t rank;  /* 1..4 */
  int64_t shape[4];
  int64_t stride_bytes[4];
  minfer_buffer *buffer; /* a buffer of the backend that receives this node */
  uint64_t offset;       /* byte offset of element 0 in buffer */
  const char *name;      /* lifetime: the call */
  int32_t token_dim;     /* -1, or the dim that follows the step's token count */
  uint32_t flags;        /* ABI 1.2: MINFER_TENSOR_* */
} minfer_tensor;

/* One graph node. Everything it points to lives for the duration of the call only:
 * a plugin that keeps a node (compile) copies it. Tensors are passed by pointer, never in
 * arrays of structs, so either side may know a longer minfer_tensor than the other. */
typedef struct minfer_node {
  size_t struct_size;
  int32_t op;   /* minfer_op */
  const char *name; /* "blk.3.attn_q": for errors and traces */
  int32_t n_inputs;
  const minfer_tensor *const *inputs; /* n_inputs pointers */
  const minfer_tensor *output;
  const minfer_params_header *params; /* the op's parameter struct, or NULL for ops without */
} minfer_node;

/* Per-step run-time arguments of execute. */
typedef struct minfer_step_args {
  size_t struct_size;
  int64_t step;     /* 0-based index of this execution in the session, for logs and traces */
  int64_t n_tokens; /* tokens in this step: the run-time extent of every tensor's token_dim */
  int64_t n_past;   /* tokens already in the KV cache before this step (their positions) */
  /* ABI 1.1: nonzero asks the plugin to time each node of this execution on its device, for
   * segment_node_times. A reader whose struct_size does not reach it treats it as 0. */
  int32_t node_times;
  /* ABI 1.5 (a reader whose struct_size does not reach them takes n_outputs = n_tokens and
   * n_seqs = 1; sdk::step_outputs, sdk::step_seqs). n_outputs: the run-time extent of every
   * MINFER_TENSOR_OUTPUT_ROWS tensor's token_dim. n_seqs: the sequences (slots) this step's
   * tokens belong to; n_seqs == n_tokens means one token of each (a decode step). */
  int64_t n_outputs;
  int64_t n_seqs;
  /* ABI 1.9 (a reader whose struct_size does not reach it takes 0; sdk::step_max_positions):
   * every token of the step has its position below this (the most positions any of its
   * sequences holds once the step's tokens are in), at most the page table's width times the
   * page size; 0: not said. A backend may size its attention work by it (CUDA: the one-token
   * kernel's splits follow the sequences' depth, not the cache's capacity). */
  int64_t max_positions;
} minfer_step_args;

typedef struct minfer_backend_api {
  size_t struct_size;
  uint32_t abi_major; /* what the plugin was built against */
  uint32_t abi_minor;
  const char *name;    /* "cpu", "cuda": the name run configs use. Static storage. */
  const char *version; /* the plugin's own version. Static storage. */

  /* Statuses. A NULL status means success; these accept only non-NULL ones. */
  int32_t (*status_code)(const minfer_status *status);
  const char *(*status_message)(const minfer_status *status); /* lifetime: until status_free */
  void (*status_free)(minfer_status *status);

  /* Devices. When *out_count is 0, why (NUL-terminated, truncated to why_size) says why. */
  minfer_status *(*device_count)(int32_t *out_count, char *why, size_t why_size);
  minfer_status *(*device_info)(int32_t device, minfer_device_info *info /* in/out */);

  /* Open a device. Options arrive as key/value strings (the plugin's section of the run
   * config); an unknown key or a bad value is an error naming it. */
  minfer_status *(*open)(int32_t device, const minfer_host *host, const char *const *option_keys,
                         const char *const *option_values, int32_t n_options,
                         minfer_backend **out);
  /* The host frees every buffer and segment of the backend before closing it. */
  void (*close)(minfer_backend *backend);

  /* Buffers: memory the plugin owns. */
  minfer_status *(*buffer_alloc)(minfer_backend *backend, uint64_t bytes, minfer_buffer **out);
  void (*buffer_free)(minfer_buffer *buffer);
  minfer_status *(*buffer_write)(minfer_buffer *buffer, uint64_t offset, const void *src,
                                 uint64_t bytes); /* completes before returning */
  minfer_status *(*buffer_read)(minfer_buffer *buffer, uint64_t offset, void *dst,
                                uint64_t bytes); /* waits for pending work, then copies */

  /* Build time: may this backend run the node? *out_yes = 1 or 0; when 0, why says why. */
  minfer_status *(*supports)(minfer_backend *backend, const minfer_node *node, int32_t *out_yes,
                             char *why, size_t why_size);
  /* Build time: compile nodes (in execution order) into a segment. Tensor buffers/offsets
   * are final: the memory plan is made before compile. */
  minfer_status *(*compile)(minfer_backend *backend, const minfer_node *const *nodes,
                            int32_t n_nodes, minfer_segment **out);
  void (*segment_free)(minfer_segment *segment);
  /* Run time: enqueue a compiled segment. May return before the device finished. */
  minfer_status *(*execute)(minfer_backend *backend, minfer_segment *segment,
                            const minfer_step_args *args);
  /* Wait until all enqueued work finished; reports errors of asynchronous work. */
  minfer_status *(*synchronize)(minfer_backend *backend);

  /* ABI 1.0 ends here. Append new entries below; never move the ones above. */

  /* ABI 1.1 (optional: may be NULL). Make a buffer of host memory without copying it: the host
   * keeps [host, host + bytes) alive and unchanged until buffer_free (the model file's mapping,
   * for weights). buffer_write to it is an error. A backend that cannot use host memory returns
   * MINFER_ERR_UNSUPPORTED, and the host allocates and copies instead. */
  minfer_status *(*buffer_wrap_host)(minfer_backend *backend, const void *host, uint64_t bytes,
                                     minfer_buffer **out);
  /* ABI 1.1 (optional: may be NULL). After an execute with node_times set has finished
   * (synchronize), the time each of the segment's n nodes took on the device, in milliseconds,
   * into ms[0..n). MINFER_ERR_UNSUPPORTED when the plugin cannot; the host times on its clock. */
  minfer_status *(*segment_node_times)(minfer_backend *backend, minfer_segment *segment, double *ms, int32_t n);
  /* ABI 1.3 (optional: may be NULL). How the backend runs node `node` (an index into the
   * segment's nodes) in a step of n_tokens tokens: a short phrase naming the kernel or path and
   * any fusion, for reports (--explain); out gets "" when there is nothing to say. The text is
   * cut to out_size - 1 bytes. MINFER_ERR_UNSUPPORTED when the plugin cannot. */
  minfer_status *(*segment_explain)(minfer_backend *backend, minfer_segment *segment, int32_t node, int64_t n_tokens, char *out,
                                    size_t out_size);
  /* ABI 1.8 (optional: may be NULL). Copy bytes from src to dst, two buffers of this plugin: of
   * one of its opened backends or of two (device to device, e.g. between two GPUs). Ordered after
   * the work enqueued so far on both buffers' backends and before the work enqueued on either
   * after it; may return before the copy finished. MINFER_ERR_UNSUPPORTED when the plugin cannot:
   * the host then copies through host memory. */
  minfer_status *(*buffer_copy)(minfer_buffer *dst, uint64_t dst_offset, minfer_buffer *src, uint64_t src_offset, uint64_t bytes);
  /* ABI 1.8 (optional: may be NULL; all three or none). Collectives over several of this plugin's
   * opened backends (tensor parallelism, `split: tensor`). group_open: backends[r] is rank r, n of
   * them; made once, at build (CUDA: one NCCL communicator per rank). The host frees the group
   * before closing its backends. group_all_reduce: for every rank r, count values of dtype (f32)
   * at recv[r] + recv_offsets[r] = the sum over all ranks of those at send[q] + send_offsets[q];
   * every rank gets the same bits. send[r] and recv[r] are buffers of rank r's backend and may be
   * the same bytes (in place). Ordered after the work enqueued so far on every rank's backend and
   * before what each enqueues next; may return before it finished. */
  minfer_status *(*group_open)(minfer_backend *const *backends, int32_t n, minfer_group **out);
  void (*group_free)(minfer_group *group);
  minfer_status *(*group_all_reduce)(minfer_group *group, int32_t dtype, uint64_t count, minfer_buffer *const *send,
                                     const uint64_t *send_offsets, minfer_buffer *const *recv, const uint64_t *recv_offsets);
  /* ABI 1.10 (optional: may be NULL; both or neither). Host memory that this backend's
   * buffer_read and buffer_write move fastest, for what the host reads every step (a decode
   * token's logits): CUDA's copy engines reach page-locked memory directly, while a copy to
   * ordinary memory goes through the driver's staging (600 KB of logits: ~25 instead of ~95 us
   * on an H100). *out gets at least bytes bytes; MINFER_ERR_UNSUPPORTED when the backend has no
   * such memory (the host then uses its own). host_free takes what host_alloc gave; the host
   * frees all of it before closing the backend. */
  minfer_status *(*host_alloc)(minfer_backend *backend, uint64_t bytes, void **out);
  void (*host_free)(minfer_backend *backend, void *host);
  /* ABI 1.10 (optional: may be NULL). buffer_read without its wait: ordered after the work
   * enqueued so far on the buffer's backend and done when that backend's next synchronize
   * returns; dst stays valid and unread until then. The host asks for a step's logits this way
   * before the step's synchronize, so they come back in the same wait. MINFER_ERR_UNSUPPORTED:
   * the host reads after synchronize instead. */
  minfer_status *(*buffer_read_async)(minfer_buffer *buffer, uint64_t offset, void *dst, uint64_t bytes);
} minfer_backend_api;

/* The entry symbol's type. The plugin returns its table (static storage) whatever the host's
 * version; the host compares versions and refuses a mismatch. */
typedef const minfer_backend_api *(*minfer_backend_entry_fn)(uint32_t host_abi_major,
                                                             uint32_t host_abi_minor);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MINFER_ABI_H */
