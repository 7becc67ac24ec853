/* Power-loss shim: an LD_PRELOAD library that keeps, beside one directory, the copy of it a
 * disk would hold if the power went out now: what was fsynced, nothing else.
 *
 * The process runs unchanged on the real files (they play the page cache: every read sees
 * every write). The shim watches the calls that change or sync files in POWERLOSS_DIR and
 * maintains, in POWERLOSS_STATE, the durable image:
 *
 *   data/<id>  the content of file <id> as of its last fsync/fdatasync: at a sync the pages
 *              written since the previous one (and any truncation) are copied in, nothing
 *              before. A file gets an id when it is created (or adopted, see anomalies);
 *              ids never repeat, so a reused inode number is a new file.
 *   ns         the directory's entries (id, mode, name) as of its last fsync: a snapshot of
 *              the real directory taken when the directory itself is fsynced. A created,
 *              linked, renamed or unlinked name is durable only then (strict POSIX: fsync of
 *              a file does not persist its directory entry).
 *   ids        "dev ino id" per id assigned (the last line for an inode is its current file).
 *   log        "S id size" per file sync, "D entries" per directory sync, "I pid" at start,
 *              "K file|dir N" when a crash point fired (see crash_point).
 *   anomalies  anything the shim cannot model (a subdirectory, a shared writable mmap of a
 *              file other than SQLite's -shm, sync()/syncfs(), a file it did not see
 *              created): a test asserts it is empty.
 *
 * After kill -9, tests/powerloss/disk.py rebuilds POWERLOSS_DIR from ns + data/ (and, in
 * "torn" mode, keeps a random subset of the unsynced pages from the real files). Files are
 * tracked when they are directly in POWERLOSS_DIR; every other descriptor passes through.
 *
 * POWERLOSS_MODE=nodirsync (a control, to prove the simulator detects loss): directory fsyncs
 * are ignored. Unset: a faithful disk.
 * The shim removes LD_PRELOAD and POWERLOSS_* from the environment at start: a child the
 * process spawns runs without it, and a forked child is not followed (the server does
 * neither).
 *
 * Build: cc -shared -fPIC -O2 -o libpowerloss.so shim.c -ldl -lpthread */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define PAGE 4096
#define FD_MAX 65536

enum { FD_UNKNOWN = 0, FD_OTHER, FD_FILE, FD_DIR };

typedef struct {
    dev_t dev;
    ino_t ino;
    int state;
    int id;
} fdinfo;

typedef struct {
    dev_t dev;
    ino_t ino;
    int id;
} inomap;

typedef struct {
    unsigned char *bits; /* one bit per PAGE written since the last sync */
    size_t nbytes;
    int64_t min_size; /* smallest size a truncation left since the last sync; -1: none */
} idstate;

static int active;
static pid_t owner_pid;
static char track_dir[PATH_MAX];
static size_t track_len;
static char state_dir[PATH_MAX];
static int ignore_dir_sync;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fdinfo fds[FD_MAX];
static inomap *inos;
static size_t n_inos, cap_inos;
static idstate *ids; /* indexed by id */
static int next_id = 1;
static size_t cap_ids;

/* the real functions */
static int (*r_openat)(int, const char *, int, ...);
static ssize_t (*r_write)(int, const void *, size_t);
static ssize_t (*r_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*r_writev)(int, const struct iovec *, int);
static ssize_t (*r_pwritev64)(int, const struct iovec *, int, off64_t);
static ssize_t (*r_pwritev64v2)(int, const struct iovec *, int, off64_t, int);
static int (*r_ftruncate64)(int, off64_t);
static int (*r_truncate64)(const char *, off64_t);
static int (*r_fallocate64)(int, int, off64_t, off64_t);
static int (*r_posix_fallocate64)(int, off64_t, off64_t);
static int (*r_fsync)(int);
static int (*r_fdatasync)(int);
static int (*r_syncfs)(int);
static void (*r_sync)(void);
static ssize_t (*r_copy_file_range)(int, off64_t *, int, off64_t *, size_t, unsigned int);
static ssize_t (*r_sendfile64)(int, int, off64_t *, size_t);
static void *(*r_mmap64)(void *, size_t, int, int, int, off64_t);

static void *sym(const char *name) {
    void *p = dlsym(RTLD_NEXT, name);
    if (p == NULL) {
        fprintf(stderr, "powerloss shim: no %s\n", name);
        abort();
    }
    return p;
}

static void resolve(void) {
    if (r_openat != NULL) return;
    r_write = sym("write");
    r_pwrite64 = sym("pwrite64");
    r_writev = sym("writev");
    r_pwritev64 = sym("pwritev64");
    r_pwritev64v2 = sym("pwritev64v2");
    r_ftruncate64 = sym("ftruncate64");
    r_truncate64 = sym("truncate64");
    r_fallocate64 = sym("fallocate64");
    r_posix_fallocate64 = sym("posix_fallocate64");
    r_fsync = sym("fsync");
    r_fdatasync = sym("fdatasync");
    r_syncfs = sym("syncfs");
    r_sync = sym("sync");
    r_copy_file_range = sym("copy_file_range");
    r_sendfile64 = sym("sendfile64");
    r_mmap64 = sym("mmap64");
    r_openat = sym("openat64");
}

/* ------------------------------------------------------------------ the state files */

static void state_path(char *out, const char *name) {
    snprintf(out, PATH_MAX, "%s/%s", state_dir, name);
}

static void append_line(const char *file, const char *line) {
    char p[PATH_MAX];
    state_path(p, file);
    int fd = r_openat(AT_FDCWD, p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    size_t n = strlen(line);
    if (r_write(fd, line, n) != (ssize_t)n) { /* nothing better to do */
    }
    close(fd);
}

static void anomaly(const char *fmt, ...) {
    char line[PATH_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    append_line("anomalies", line);
}

static void logf_(const char *fmt, ...) {
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    append_line("log", line);
}

/* ------------------------------------------------------------------ ids */

static idstate *id_state(int id) {
    if ((size_t)id >= cap_ids) {
        size_t cap = cap_ids ? cap_ids : 64;
        while (cap <= (size_t)id) cap *= 2;
        ids = realloc(ids, cap * sizeof *ids);
        memset(ids + cap_ids, 0, (cap - cap_ids) * sizeof *ids);
        for (size_t i = cap_ids; i < cap; i++) ids[i].min_size = -1;
        cap_ids = cap;
    }
    return &ids[id];
}

static int lookup_ino(dev_t dev, ino_t ino) {
    for (size_t i = 0; i < n_inos; i++)
        if (inos[i].dev == dev && inos[i].ino == ino) return inos[i].id;
    return 0;
}

/* The inode (dev, ino) is file `id` from now on; `record`: append it to the ids file. */
static void bind_ino(dev_t dev, ino_t ino, int id, int record) {
    if (record) {
        char line[128];
        snprintf(line, sizeof line, "%llu %llu %d\n", (unsigned long long)dev,
                 (unsigned long long)ino, id);
        append_line("ids", line);
    }
    for (size_t i = 0; i < n_inos; i++)
        if (inos[i].dev == dev && inos[i].ino == ino) {
            inos[i].id = id;
            return;
        }
    if (n_inos == cap_inos) {
        cap_inos = cap_inos ? cap_inos * 2 : 64;
        inos = realloc(inos, cap_inos * sizeof *inos);
    }
    inos[n_inos++] = (inomap){dev, ino, id};
}

/* Copy all of `src_fd` (a readable descriptor) as the durable content of `id`. */
static void copy_whole(int src_fd, int id) {
    char p[PATH_MAX], name[64];
    snprintf(name, sizeof name, "data/%d", id);
    state_path(p, name);
    int out = r_openat(AT_FDCWD, p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) {
        anomaly("cannot write %s: %s", p, strerror(errno));
        return;
    }
    char buf[65536];
    off64_t off = 0;
    for (;;) {
        ssize_t n = pread64(src_fd, buf, sizeof buf, off);
        if (n <= 0) break;
        if (r_pwrite64(out, buf, (size_t)n, off) != n) anomaly("short write to %s", p);
        off += n;
    }
    close(out);
}

/* A new file: a fresh id, empty durable content (nothing of it was synced yet). */
static int new_id(dev_t dev, ino_t ino) {
    int id = next_id++;
    idstate *s = id_state(id);
    free(s->bits);
    s->bits = NULL;
    s->nbytes = 0;
    s->min_size = -1;
    bind_ino(dev, ino, id, 1);
    return id;
}

/* A file the shim did not see created: its current content counts as synced. */
static int adopt(dev_t dev, ino_t ino, int fd, const char *why, const char *path) {
    int id = new_id(dev, ino);
    if (why != NULL) anomaly("%s: %s (taken as synced)", why, path);
    copy_whole(fd, id);
    return id;
}

/* ------------------------------------------------------------------ descriptors */

static int in_track_dir(const char *path) {
    if (strncmp(path, track_dir, track_len) != 0 || path[track_len] != '/') return 0;
    const char *rest = path + track_len + 1;
    if (strchr(rest, '/') != NULL) {
        anomaly("a file in a subdirectory (not modelled): %s", path);
        return 0;
    }
    return 1;
}

/* What `fd` is (under mu). `created`: the caller just created the file it names. */
static fdinfo *classify(int fd, int created) {
    static fdinfo other = {0, 0, FD_OTHER, 0};
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return &other;
    if (fd >= FD_MAX) {
        char link[64], path[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, path, sizeof path - 1);
        path[n > 0 ? n : 0] = '\0';
        if (strncmp(path, track_dir, track_len) == 0 && path[track_len] == '/')
            anomaly("a descriptor above %d (not modelled): %s", FD_MAX, path);
        return &other;
    }
    fdinfo *f = &fds[fd];
    /* a cached answer holds while the descriptor names the same inode and, for a tracked
     * file, that inode is still the same file (its number was not reused since) */
    if (!created && f->state != FD_UNKNOWN && f->dev == st.st_dev && f->ino == st.st_ino &&
        (f->state != FD_FILE || lookup_ino(st.st_dev, st.st_ino) == f->id))
        return f;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->state = FD_OTHER;
    f->id = 0;
    if (n <= 0) return f;
    path[n] = '\0';
    if (S_ISDIR(st.st_mode)) {
        if (strcmp(path, track_dir) == 0) f->state = FD_DIR;
        else if (strncmp(path, track_dir, track_len) == 0 && path[track_len] == '/')
            anomaly("a subdirectory (not modelled): %s", path);
        return f;
    }
    if (!S_ISREG(st.st_mode) || !in_track_dir(path)) return f;
    f->state = FD_FILE;
    if (created) {
        f->id = new_id(st.st_dev, st.st_ino);
    } else {
        f->id = lookup_ino(st.st_dev, st.st_ino);
        if (f->id == 0) f->id = adopt(st.st_dev, st.st_ino, fd, "a file not seen created", path);
    }
    return f;
}

static void mark_dirty(int id, off64_t off, off64_t len) {
    if (len <= 0 || off < 0) return;
    idstate *s = id_state(id);
    size_t last = (size_t)((off + len - 1) / PAGE);
    size_t need = last / 8 + 1;
    if (need > s->nbytes) {
        size_t cap = s->nbytes ? s->nbytes : 64;
        while (cap < need) cap *= 2;
        s->bits = realloc(s->bits, cap);
        memset(s->bits + s->nbytes, 0, cap - s->nbytes);
        s->nbytes = cap;
    }
    for (size_t p = (size_t)(off / PAGE); p <= last; p++)
        s->bits[p / 8] |= (unsigned char)(1u << (p % 8));
}

static void mark_truncated(int id, off64_t len) {
    idstate *s = id_state(id);
    if (s->min_size < 0 || len < s->min_size) s->min_size = len;
}

/* fsync/fdatasync of a tracked file succeeded: what it wrote since the last sync is durable. */
static void sync_file(int fd, int id) {
    idstate *s = id_state(id);
    struct stat st;
    if (fstat(fd, &st) != 0) return;
    char p[PATH_MAX], name[64];
    snprintf(name, sizeof name, "data/%d", id);
    state_path(p, name);
    int out = r_openat(AT_FDCWD, p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (out < 0) {
        anomaly("cannot write %s: %s", p, strerror(errno));
        return;
    }
    int rfd = fd, own = 0;
    if ((fcntl(fd, F_GETFL) & O_ACCMODE) == O_WRONLY) {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        rfd = r_openat(AT_FDCWD, link, O_RDONLY | O_CLOEXEC);
        own = 1;
        if (rfd < 0) {
            anomaly("cannot read back %s", link);
            close(out);
            return;
        }
    }
    if (s->min_size >= 0 && r_ftruncate64(out, s->min_size) != 0) anomaly("ftruncate %s", p);
    char buf[PAGE];
    for (size_t p8 = 0; p8 < s->nbytes; p8++) {
        if (s->bits[p8] == 0) continue;
        for (int b = 0; b < 8; b++) {
            if (!(s->bits[p8] & (1u << b))) continue;
            off64_t off = (off64_t)(p8 * 8 + (size_t)b) * PAGE;
            if (off >= st.st_size) continue;
            ssize_t n = pread64(rfd, buf, PAGE, off);
            if (n > 0 && r_pwrite64(out, buf, (size_t)n, off) != n) anomaly("short write %s", p);
        }
    }
    if (r_ftruncate64(out, st.st_size) != 0) anomaly("ftruncate %s", p);
    close(out);
    if (own) close(rfd);
    if (s->bits != NULL) memset(s->bits, 0, s->nbytes);
    s->min_size = -1;
    logf_("S %d %lld", id, (long long)st.st_size);
}

/* fsync of the tracked directory succeeded: its entries, as they are now, are durable. */
static void sync_dir(void) {
    DIR *d = opendir(track_dir);
    if (d == NULL) {
        anomaly("cannot list %s", track_dir);
        return;
    }
    char tmp[PATH_MAX], final[PATH_MAX];
    state_path(tmp, "ns.tmp");
    state_path(final, "ns");
    int out = r_openat(AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) {
        anomaly("cannot write %s", tmp);
        closedir(d);
        return;
    }
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!S_ISREG(st.st_mode)) {
            anomaly("not a regular file (not modelled): %s/%s", track_dir, e->d_name);
            continue;
        }
        int id = lookup_ino(st.st_dev, st.st_ino);
        if (id == 0) {
            int fd = r_openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            id = adopt(st.st_dev, st.st_ino, fd, "an entry not seen created", e->d_name);
            close(fd);
        }
        char line[NAME_MAX + 64];
        int n = snprintf(line, sizeof line, "%d\t%o\t%s\n", id, st.st_mode & 07777, e->d_name);
        if (r_write(out, line, (size_t)n) != n) anomaly("short write %s", tmp);
        count++;
    }
    closedir(d);
    close(out);
    if (rename(tmp, final) != 0) anomaly("cannot rename %s", tmp);
    logf_("D %d", count);
}

/* ------------------------------------------------------------------ start */

static void child_after_fork(void) {
    active = 0; /* the image belongs to the parent */
}

__attribute__((constructor)) static void powerloss_init(void) {
    resolve();
    const char *dir = getenv("POWERLOSS_DIR"), *state = getenv("POWERLOSS_STATE");
    const char *mode = getenv("POWERLOSS_MODE");
    if (dir == NULL || state == NULL || *dir == '\0' || *state == '\0') return;
    if (realpath(dir, track_dir) == NULL || realpath(state, state_dir) == NULL) {
        fprintf(stderr, "powerloss shim: POWERLOSS_DIR/POWERLOSS_STATE must exist\n");
        abort();
    }
    track_len = strlen(track_dir);
    if (mode != NULL && strcmp(mode, "nodirsync") == 0) ignore_dir_sync = 1;
    else if (mode != NULL && *mode != '\0') {
        fprintf(stderr, "powerloss shim: unknown POWERLOSS_MODE %s\n", mode);
        abort();
    }
    unsetenv("LD_PRELOAD");
    unsetenv("POWERLOSS_DIR");
    unsetenv("POWERLOSS_STATE");
    unsetenv("POWERLOSS_MODE");
    char p[PATH_MAX];
    state_path(p, "data");
    mkdir(p, 0700);
    state_path(p, "ns");
    struct stat st;
    if (stat(p, &st) == 0) {
        /* a second process on the same image: go on from its ids */
        state_path(p, "ids");
        FILE *f = fopen(p, "r");
        unsigned long long dv, in;
        int id;
        while (f != NULL && fscanf(f, "%llu %llu %d", &dv, &in, &id) == 3) {
            bind_ino((dev_t)dv, (ino_t)in, id, 0);
            if (id >= next_id) next_id = id + 1;
        }
        if (f != NULL) fclose(f);
    } else {
        /* the machine starts with what is on the disk now: all of it durable */
        DIR *d = opendir(track_dir);
        while (d != NULL) {
            struct dirent *e = readdir(d);
            if (e == NULL) break;
            struct stat es;
            if (fstatat(dirfd(d), e->d_name, &es, AT_SYMLINK_NOFOLLOW) != 0 ||
                !S_ISREG(es.st_mode))
                continue;
            int fd = r_openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            adopt(es.st_dev, es.st_ino, fd, NULL, e->d_name);
            close(fd);
        }
        if (d != NULL) closedir(d);
        sync_dir();
    }
    owner_pid = getpid();
    pthread_atfork(NULL, NULL, child_after_fork);
    logf_("I %d", (int)owner_pid);
    active = 1;
}

/* ------------------------------------------------------------------ open */

static int do_open(int dirfd, const char *path, int flags, mode_t mode) {
    resolve();
    if (!active) return r_openat(dirfd, path, flags, mode);
    if (!(flags & O_CREAT)) {
        int fd = r_openat(dirfd, path, flags, mode);
        if (fd < 0 || !(flags & O_TRUNC)) return fd;  /* classified at its first write */
        int saved = errno;
        pthread_mutex_lock(&mu);
        fdinfo *f = classify(fd, 0);
        if (f->state == FD_FILE && (flags & O_ACCMODE) != O_RDONLY) mark_truncated(f->id, 0);
        pthread_mutex_unlock(&mu);
        errno = saved;
        return fd;
    }
    /* A create: under mu from before to after, so that a directory sync in another thread
     * sees the new name only together with its id. */
    pthread_mutex_lock(&mu);
    struct stat st;
    int existed = fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
    int fd = r_openat(dirfd, path, flags, mode);
    if (fd < 0) {
        pthread_mutex_unlock(&mu);
        return fd;
    }
    int saved = errno;
    fdinfo *f = classify(fd, !existed);
    if (f->state == FD_FILE && (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY)
        mark_truncated(f->id, 0);
    pthread_mutex_unlock(&mu);
    errno = saved;
    return fd;
}

static mode_t mode_arg(int flags, va_list ap) {
    return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return do_open(AT_FDCWD, path, flags, m);
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return do_open(AT_FDCWD, path, flags, m);
}

int openat(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return do_open(dirfd, path, flags, m);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return do_open(dirfd, path, flags, m);
}

int creat(const char *path, mode_t mode) {
    return do_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

int creat64(const char *path, mode_t mode) {
    return do_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

/* ------------------------------------------------------------------ writes */

/* Lock and classify; returns the tracked file's id with mu held, or 0 with mu released. */
static int tracked_file(int fd) {
    resolve();
    if (!active) return 0;
    pthread_mutex_lock(&mu);
    fdinfo *f = classify(fd, 0);
    if (f->state == FD_FILE) return f->id;
    pthread_mutex_unlock(&mu);
    return 0;
}

static off64_t write_offset(int fd) {
    if (fcntl(fd, F_GETFL) & O_APPEND) {
        struct stat st;
        return fstat(fd, &st) == 0 ? st.st_size : 0;
    }
    return lseek64(fd, 0, SEEK_CUR);
}

ssize_t write(int fd, const void *buf, size_t n) {
    int id = tracked_file(fd);
    if (id == 0) return r_write(fd, buf, n);
    off64_t off = write_offset(fd);
    ssize_t r = r_write(fd, buf, n);
    int saved = errno;
    if (r > 0) mark_dirty(id, off, r);
    pthread_mutex_unlock(&mu);
    errno = saved;
    return r;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    int id = tracked_file(fd);
    if (id == 0) return r_pwrite64(fd, buf, n, off);
    ssize_t r = r_pwrite64(fd, buf, n, off);
    int saved = errno;
    if (r > 0) mark_dirty(id, off, r);
    pthread_mutex_unlock(&mu);
    errno = saved;
    return r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    return pwrite64(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    int id = tracked_file(fd);
    if (id == 0) return r_writev(fd, iov, cnt);
    off64_t off = write_offset(fd);
    ssize_t r = r_writev(fd, iov, cnt);
    int saved = errno;
    if (r > 0) mark_dirty(id, off, r);
    pthread_mutex_unlock(&mu);
    errno = saved;
    return r;
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) {
    int id = tracked_file(fd);
    if (id == 0) return r_pwritev64(fd, iov, cnt, off);
    ssize_t r = r_pwritev64(fd, iov, cnt, off);
    int saved = errno;
    if (r > 0) mark_dirty(id, off, r);
    pthread_mutex_unlock(&mu);
    errno = saved;
    return r;
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    return pwritev64(fd, iov, cnt, off);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags) {
    int id = tracked_file(fd);
    if (id == 0) return r_pwritev64v2(fd, iov, cnt, off, flags);
    off64_t at = off == -1 ? write_offset(fd) : off;
    ssize_t r = r_pwritev64v2(fd, iov, cnt, off, flags);
    int saved = errno;
    if (r > 0) mark_dirty(id, at, r);
    pthread_mutex_unlock(&mu);
    errno = saved;
    return r;
}

ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) {
    return pwritev64v2(fd, iov, cnt, off, flags);
}

int ftruncate64(int fd, off64_t len) {
    int id = tracked_file(fd);
    if (id == 0) return r_ftruncate64(fd, len);
    int r = r_ftruncate64(fd, len);
    int saved = errno;
    if (r == 0) mark_truncated(id, len);
    pthread_mutex_unlock(&mu);
    errno = saved;
    return r;
}

int ftruncate(int fd, off_t len) { return ftruncate64(fd, len); }

int truncate64(const char *path, off64_t len) {
    resolve();
    if (!active) return r_truncate64(path, len);
    int fd = r_openat(AT_FDCWD, path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return r_truncate64(path, len);
    int r = ftruncate64(fd, len);
    int saved = errno;
    close(fd);
    errno = saved;
    return r;
}

int truncate(const char *path, off_t len) { return truncate64(path, len); }

int fallocate64(int fd, int mode, off64_t off, off64_t len) {
    int id = tracked_file(fd);
    if (id == 0) return r_fallocate64(fd, mode, off, len);
    int r = r_fallocate64(fd, mode, off, len);
    int saved = errno;
    if (r == 0) mark_dirty(id, off, len);
    pthread_mutex_unlock(&mu);
    errno = saved;
    return r;
}

int fallocate(int fd, int mode, off_t off, off_t len) { return fallocate64(fd, mode, off, len); }

int posix_fallocate64(int fd, off64_t off, off64_t len) {
    int id = tracked_file(fd);
    if (id == 0) return r_posix_fallocate64(fd, off, len);
    int r = r_posix_fallocate64(fd, off, len);
    if (r == 0) mark_dirty(id, off, len);
    pthread_mutex_unlock(&mu);
    return r;
}

int posix_fallocate(int fd, off_t off, off_t len) { return posix_fallocate64(fd, off, len); }

ssize_t copy_file_range(int in, off64_t *in_off, int out, off64_t *out_off, size_t n,
                        unsigned int flags) {
    int id = tracked_file(out);
    if (id == 0) return r_copy_file_range(in, in_off, out, out_off, n, flags);
    off64_t at = out_off != NULL ? *out_off : write_offset(out);
    ssize_t r = r_copy_file_range(in, in_off, out, out_off, n, flags);
    int saved = errno;
    if (r > 0) mark_dirty(id, at, r);
    pthread_mutex_unlock(&mu);
    errno = saved;
    return r;
}

ssize_t sendfile64(int out, int in, off64_t *off, size_t n) {
    int id = tracked_file(out);
    if (id == 0) return r_sendfile64(out, in, off, n);
    off64_t at = write_offset(out);
    ssize_t r = r_sendfile64(out, in, off, n);
    int saved = errno;
    if (r > 0) mark_dirty(id, at, r);
    pthread_mutex_unlock(&mu);
    errno = saved;
    return r;
}

ssize_t sendfile(int out, int in, off_t *off, size_t n) {
    if (off == NULL) return sendfile64(out, in, NULL, n);
    off64_t o = *off;
    ssize_t r = sendfile64(out, in, &o, n);
    *off = (off_t)o;
    return r;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off) {
    resolve();
    if (active && fd >= 0 && (prot & PROT_WRITE) && (flags & MAP_SHARED)) {
        pthread_mutex_lock(&mu);
        fdinfo *f = classify(fd, 0);
        if (f->state == FD_FILE) {
            char link[64], path[PATH_MAX];
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, path, sizeof path - 1);
            path[n > 0 ? n : 0] = '\0';
            size_t len_p = strlen(path);
            /* SQLite's wal-index: never synced, rebuilt after a crash; its content is moot */
            if (len_p < 4 || strcmp(path + len_p - 4, "-shm") != 0)
                anomaly("a shared writable mmap (not modelled): %s", path);
        }
        pthread_mutex_unlock(&mu);
    }
    return r_mmap64(addr, len, prot, flags, fd, off);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap64(addr, len, prot, flags, fd, off);
}

/* ------------------------------------------------------------------ syncs */

/* A crash point: the test writes "file N" or "dir N" to STATE/crash once the process is up;
 * the Nth tracked file (or directory) sync from then on kills the process (SIGKILL) before
 * it reaches the disk: the power goes out just as that fsync is issued. */
static long crash_at = -1, crash_count;
static int crash_dir;

static void crash_point(int kind) {
    if (crash_at < 0) {
        char p[PATH_MAX], what[16];
        state_path(p, "crash");
        int fd = r_openat(AT_FDCWD, p, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return;
        char buf[64] = {0};
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        long at;
        if (n <= 0 || sscanf(buf, "%15s %ld", what, &at) != 2 || at < 1) return;
        crash_dir = strcmp(what, "dir") == 0;
        crash_at = at;
    }
    if ((kind == FD_DIR) != crash_dir || ++crash_count < crash_at) return;
    logf_("K %s %ld", crash_dir ? "dir" : "file", crash_at);
    kill(getpid(), SIGKILL);
    pause();
}

static int do_sync(int fd, int (*real)(int)) {
    resolve();
    if (!active) return real(fd);
    /* mu held across the real sync and the copy: a write from another thread lands either
     * before both (and is durable) or after both (and is not) */
    pthread_mutex_lock(&mu);
    fdinfo *f = classify(fd, 0);
    int kind = f->state, id = f->id, owner = getpid() == owner_pid;
    if (owner && (kind == FD_FILE || kind == FD_DIR)) crash_point(kind);
    int r = real(fd);
    int saved = errno;
    if (r == 0 && owner) {
        if (kind == FD_FILE) sync_file(fd, id);
        else if (kind == FD_DIR && !ignore_dir_sync) sync_dir();
    }
    pthread_mutex_unlock(&mu);
    errno = saved;
    return r;
}

int fsync(int fd) {
    resolve();
    return do_sync(fd, r_fsync);
}

int fdatasync(int fd) {
    resolve();
    return do_sync(fd, r_fdatasync);
}

int syncfs(int fd) {
    resolve();
    if (active) anomaly("syncfs (not modelled)");
    return r_syncfs(fd);
}

void sync(void) {
    resolve();
    if (active) anomaly("sync (not modelled)");
    r_sync();
}
