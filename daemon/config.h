/* ktuned's configuration: built-in defaults, then the config file (`key = value` lines, the keys
 * being the long option names), then the command line, each overriding the one before. */
#pragma once

#include "ops/util.h"

#include <sys/types.h>

#define KD_DEFAULT_SOCKET        "/run/ktune/ktuned.sock"
#define KD_DEFAULT_CACHE         "/var/lib/ktune/cache"
#define KD_DEFAULT_CONFIG        "/etc/ktune/ktuned.conf"
#define KD_DEFAULT_MAX_CLIENTS   4096
#define KD_DEFAULT_PER_UID       64 /* connections of one uid (root: no limit) */
#define KD_DEFAULT_ROOT_RESERVED 8  /* of max-clients, kept for uid 0 */
#define KD_DEFAULT_IDLE_TIMEOUT  300.0
#define KD_DEFAULT_MAX_BUFFERED  ((size_t)256 << 20)
#define KD_MIN_MAX_BUFFERED      ((size_t)8 << 20) /* two requests of the largest size */
#define KD_DEFAULT_BUDGET_MAX    86400.0
#define KD_DEFAULT_TOLERANCE_MAX 10.0 /* times the dtype and precision default */
#define KD_MAX_GPUS              64
#define KD_SOCKET_PATH_MAX       108 /* sizeof(sockaddr_un.sun_path) */
#define KD_PATH_MAX              4096

typedef struct kd_config {
    char config[KD_PATH_MAX]; /* the file read, "" when the default was absent */
    char socket[KD_SOCKET_PATH_MAX];
    char cache[KD_PATH_MAX];
    char worker[KD_PATH_MAX]; /* "" : srch_worker_opts' lookup */
    bool gpus_auto;
    int n_gpus;
    int gpus[KD_MAX_GPUS]; /* CUDA device indices, when not auto */
    int compile_jobs;      /* in all, split across GPUs; 0: one per CPU */
    int max_clients;
    int max_clients_per_uid; /* connections of one non-root uid */
    int root_reserved;       /* the last root_reserved of max_clients admit uid 0 only (by
                              * default 8, at most half of max_clients) */
    double idle_timeout_s;   /* an idle connection is closed after this; 0: never */
    size_t max_buffered;     /* request and reply bytes buffered across all connections */
    int log_level;           /* KT_LOG_* */
    double budget_max_s;
    double tolerance_max_factor; /* how far above its dtype's default a job's tolerance may go */
    /* members may cancel any job and submit above the default priority (docs/protocol.md,
     * "Ownership"); root and ktuned's own uid always may */
    bool admin_set;
    gid_t admin_gid;
    char admin_group[64]; /* as configured, for messages */
} kd_config;

enum kd_config_result {
    KD_CONFIG_RUN = 0,  /* start the daemon */
    KD_CONFIG_EXIT = 1, /* --help or --version was printed: exit 0 */
};

/* Fills c from the defaults ($KTUNE_SOCKET, $KTUNE_CACHE), the config file (--config PATH, else
 * KD_DEFAULT_CONFIG when it exists) and argv. Returns KD_CONFIG_RUN, KD_CONFIG_EXIT, or -EINVAL
 * with one line in err: "PATH:LINE: ..." for the file, "--opt: ..." for the command line. */
int kd_config_load(kd_config *c, int argc, char **argv, kt_err *err);

/* Parses "90", "90s", "1.5m", "2h" into seconds; -1 when malformed or not > 0. */
double kd_parse_duration(const char *s);

/* `gpus = auto`: the CUDA indices 0..n-1 of the GPUs visible to this process, into out (at most
 * cap) and their count. visible is $CUDA_VISIBLE_DEVICES (NULL: unset): when set, as a Slurm
 * allocation sets it, the devices it names up to CUDA's first unusable entry, at most as many
 * as proc_dir (the driver's /proc/driver/nvidia/gpus) lists; else every GPU proc_dir lists.
 * None visible, or no proc_dir here (a container without the driver's /proc): GPU 0 alone,
 * whose worker then says what it found. */
int kd_auto_gpus(const char *proc_dir, const char *visible, int *out, int cap);
