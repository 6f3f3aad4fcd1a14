/*
 * lz4 frames for the Sender's sealing (_append_seal.c): the lz4.frame
 * package's frames (independent 64 KiB blocks, no checksums, no content
 * size, as protocol/compression.py makes them), by the package's own
 * library. load_lz4 finds its LZ4F functions in the package's extension,
 * already loaded in this process, so no second copy of lz4 is linked and
 * the output is the same bytes as compression.py's (sealing.lz4_in_c
 * checks a sample; tests/pool/test_sealing.py the edges).
 *
 * Part of the _append extension (_append_internal.h).
 *
 * The style is CPython's (PEP 7).
 */
#include "_append_internal.h"

#include <dlfcn.h>

/* dlopen and dlsym moved from libdl into libc in glibc 2.34, which kept the
 * old versions: bound to those, the wheel runs on older systems too (see
 * the semaphores in _append_internal.h). */
#ifdef SHMKAFKA_OLD_SEM
__asm__(".symver dlopen,dlopen@" SHMKAFKA_OLD_SEM);
__asm__(".symver dlsym,dlsym@" SHMKAFKA_OLD_SEM);
#endif

/* ------------------------------------------------------------------------
 * lz4's frame API, as lz4frame.h declares it (its ABI, stable since 1.8).
 */

typedef struct {
    unsigned block_size_id;        /* LZ4F_max64KB = 4 */
    unsigned block_mode;           /* LZ4F_blockIndependent = 1 */
    unsigned content_checksum;
    unsigned frame_type;
    unsigned long long content_size;
    unsigned dict_id;
    unsigned block_checksum;
} Lz4FrameInfo;

typedef struct {
    Lz4FrameInfo frame_info;
    int compression_level;
    unsigned auto_flush;
    unsigned favor_dec_speed;
    unsigned reserved[3];
} Lz4Preferences;

enum { LZ4F_API_VERSION = 100, LZ4F_MAX64KB = 4, LZ4F_INDEPENDENT = 1,
       LZ4F_HEADER_MAX = 19 };

static struct {
    int loaded;
    unsigned (*get_version)(void);
    size_t (*create)(void **cctx, unsigned version);
    size_t (*release)(void *cctx);
    size_t (*bound)(size_t src_size, const Lz4Preferences *prefs);
    size_t (*begin)(void *cctx, void *dst, size_t capacity,
                    const Lz4Preferences *prefs);
    size_t (*update)(void *cctx, void *dst, size_t capacity, const void *src,
                     size_t src_size, const void *options);
    size_t (*end)(void *cctx, void *dst, size_t capacity,
                  const void *options);
    unsigned (*is_error)(size_t code);
    const char *(*error_name)(size_t code);
} lz4;

static int
lz4_symbol(void *library, const char *name, void **out)
{
    *out = dlsym(library, name);
    return *out != NULL;
}

/* load_lz4(path): see _append.pyi. */
PyObject *
append_load_lz4(PyObject *module, PyObject *arg)
{
    (void)module;
    if (lz4.loaded) {
        Py_RETURN_TRUE;
    }
    if (!PyUnicode_Check(arg)) {
        bad_argument("load_lz4", "path", "str", arg);
        return NULL;
    }
    const char *path = PyUnicode_AsUTF8(arg);
    if (path == NULL) {
        return NULL;
    }
    /* only a library this process loaded already: never a second copy */
    void *library = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (library == NULL
        || !lz4_symbol(library, "LZ4F_getVersion", (void **)&lz4.get_version)
        || !lz4_symbol(library, "LZ4F_createCompressionContext",
                       (void **)&lz4.create)
        || !lz4_symbol(library, "LZ4F_freeCompressionContext",
                       (void **)&lz4.release)
        || !lz4_symbol(library, "LZ4F_compressBound", (void **)&lz4.bound)
        || !lz4_symbol(library, "LZ4F_compressBegin", (void **)&lz4.begin)
        || !lz4_symbol(library, "LZ4F_compressUpdate", (void **)&lz4.update)
        || !lz4_symbol(library, "LZ4F_compressEnd", (void **)&lz4.end)
        || !lz4_symbol(library, "LZ4F_isError", (void **)&lz4.is_error)
        || !lz4_symbol(library, "LZ4F_getErrorName",
                       (void **)&lz4.error_name)
        || lz4.get_version() != LZ4F_API_VERSION)
    {
        Py_RETURN_FALSE;  /* (the handle stays open: the package holds it) */
    }
    lz4.loaded = 1;
    Py_RETURN_TRUE;
}

/* The preferences of compression.py's frames at `level`. */
static Lz4Preferences
lz4_preferences(int level)
{
    Lz4Preferences prefs;

    memset(&prefs, 0, sizeof(prefs));
    prefs.frame_info.block_size_id = LZ4F_MAX64KB;
    prefs.frame_info.block_mode = LZ4F_INDEPENDENT;
    prefs.compression_level = level;
    prefs.auto_flush = 1;
    return prefs;
}

static int
lz4_failed(size_t code, const char *step)
{
    if (!lz4.is_error(code)) {
        return 0;
    }
    PyErr_Format(PyExc_RuntimeError, "lz4 %s failed: %s", step,
                 lz4.error_name(code));
    return 1;
}

/* The lz4 frame of src[0:size] written at dst (room for
 * lz4_frame_bound(size)): its length, or -1 with an exception set. */
Py_ssize_t
lz4_frame_into(FastAppend *self, char *dst, const char *src, size_t size,
               int level)
{
    if (self->lz4_cctx == NULL
        && lz4_failed(lz4.create(&self->lz4_cctx, LZ4F_API_VERSION),
                      "context"))
    {
        self->lz4_cctx = NULL;
        return -1;
    }
    Lz4Preferences prefs = lz4_preferences(level);
    size_t room = lz4_frame_bound(size, level);
    size_t head = lz4.begin(self->lz4_cctx, dst, room, &prefs);
    if (lz4_failed(head, "begin")) {
        return -1;
    }
    size_t body = lz4.update(self->lz4_cctx, dst + head, room - head, src,
                             size, NULL);
    if (lz4_failed(body, "update")) {
        return -1;
    }
    size_t end = lz4.end(self->lz4_cctx, dst + head + body,
                         room - head - body, NULL);
    if (lz4_failed(end, "end")) {
        return -1;
    }
    return (Py_ssize_t)(head + body + end);
}

size_t
lz4_frame_bound(size_t size, int level)
{
    Lz4Preferences prefs = lz4_preferences(level);

    return LZ4F_HEADER_MAX + lz4.bound(size, &prefs) + lz4.bound(0, &prefs);
}

void
lz4_release(FastAppend *self)
{
    if (self->lz4_cctx != NULL) {
        lz4.release(self->lz4_cctx);
        self->lz4_cctx = NULL;
    }
}

int
lz4_ready(void)
{
    return lz4.loaded;
}

/* FastAppend.lz4_frame(data, level): see _append.pyi. */
PyObject *
FastAppend_lz4_frame(FastAppend *self, PyObject *const *args,
                     Py_ssize_t nargs)
{
    static const char fname[] = "lz4_frame";
    Py_ssize_t level;

    if (check_nargs(fname, nargs, 2) < 0
        || ssize_arg(fname, "level", args[1], &level) < 0)
    {
        return NULL;
    }
    if (!lz4.loaded) {
        PyErr_SetString(PyExc_RuntimeError, "lz4_frame(): load_lz4 first");
        return NULL;
    }
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(
        NULL, (Py_ssize_t)lz4_frame_bound((size_t)data.len, (int)level));
    Py_ssize_t n = out == NULL ? -1 : lz4_frame_into(
        self, PyBytes_AS_STRING(out), data.buf, (size_t)data.len, (int)level);
    PyBuffer_Release(&data);
    if (n < 0 || _PyBytes_Resize(&out, n) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

