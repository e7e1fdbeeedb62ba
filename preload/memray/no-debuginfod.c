/* libdebuginfod's three calls, for memray's vendored libbacktrace, which
 * reaches them only while it symbolises a capture (memray's own reader: its
 * flamegraph and table commands). The tracker a service runs never does:
 * memprofile report symbolises from the image's own files. Linking the real
 * libdebuginfod would bring libcurl and a dozen more libraries into every
 * image; these say "not found", as libdebuginfod does without DEBUGINFOD_URLS.
 * Hidden: the extension keeps them to itself. */
#include <stddef.h>

typedef struct debuginfod_client debuginfod_client;

__attribute__((visibility("hidden"))) debuginfod_client *debuginfod_begin(void) { return NULL; }

__attribute__((visibility("hidden"))) int debuginfod_find_debuginfo(debuginfod_client *client,
                                                                     const unsigned char *build_id, int build_id_len,
                                                                     char **path) {
  (void)client;
  (void)build_id;
  (void)build_id_len;
  (void)path;
  return -2; /* -ENOENT */
}

__attribute__((visibility("hidden"))) void debuginfod_end(debuginfod_client *client) { (void)client; }
