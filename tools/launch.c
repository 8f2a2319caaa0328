/* launch.c - `--nproc P`: this command again under `mpiexec -n P`, started and waited for by
 * this process, so that the signals a user or a scheduler sends it stop the job well.
 *
 * mpiexec (Open MPI) meets SIGINT, SIGTERM and SIGHUP by killing the ranks (SIGCONT; a
 * second later SIGTERM; a second after that SIGKILL, which cuts a checkpoint short), but
 * passes SIGUSR1 and SIGUSR2 on to every rank and lets the job go on. So mpiexec runs in a
 * process group of its own (a terminal's Ctrl-C reaches this launcher alone) and starts
 * with SIGTERM blocked (the mask survives exec, and Open MPI does not clear it; the ranks
 * it starts get a clear mask): a SIGTERM sent to mpiexec itself, as Slurm sends one to every
 * process of a job in no set order, stays pending and does nothing but tell the launcher
 * (which reads it in /proc) to stop the job as for a SIGTERM of its own. The launcher turns the
 * first SIGTERM or SIGINT into SIGUSR1 or SIGUSR2 for mpiexec; the ranks, which know they
 * run under this launcher from REDCO_LAUNCHER in their environment, read those as the
 * SIGTERM or SIGINT they stand for (rc_dist_stop_signal), and the SIGTERM that reaches them
 * straight from the scheduler as the same stop. A signal within RC_STOP_REPEAT_MS of the
 * first is a copy of it; a second one after that is passed on as SIGINT: mpiexec then ends
 * the job at once (checkpoints are written atomically), as it does should the launcher die.
 * mpiexec's stderr, the ranks' with it, passes through the launcher, less mpiexec's
 * "Forwarding signal" lines about those notices.
 *
 * A rank of this job does not exit non-zero (mpiexec would print a page about a failed
 * job under the one line that says what went wrong): it writes its exit status into its
 * own file of the directory named by REDCO_LAUNCHER and exits 0, and the launcher exits
 * with the status of the lowest rank that left one. A rank that cannot write there (on
 * another host) exits with its status as usual.
 *
 * A rank whose watchdog found a host unreachable (src/parallel/watchdog.c) also leaves the
 * file "lost": mpiexec would wait for that host's daemon forever, so the launcher gives it
 * LOST_GRACE_S seconds to end, then kills it, and from then on passes only redco's own
 * lines (not mpiexec's page about ranks that ended without MPI_Finalize). */
#include "cli.h"
#include "redco/dist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t launcher_signal, launcher_signals;
static struct timespec launcher_first; /* when the first signal came */

enum { LOST_GRACE_S = 3 };     /* how long mpiexec may take to end after a host was lost */
static int lost_host;          /* a rank left "lost": relay redco's lines alone */

/* counts the signals, less the copies of the first (RC_STOP_REPEAT_MS) */
static void on_launcher_signal(int sig)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
    if (launcher_signal) {
        double ms = 1e3 * (double)(now.tv_sec - launcher_first.tv_sec) +
                    1e-6 * (double)(now.tv_nsec - launcher_first.tv_nsec);
        if (ms < RC_STOP_REPEAT_MS)
            return;
    } else {
        launcher_signal = sig;
        launcher_first = now;
    }
    launcher_signals++;
}

/* the mpiexec command line: argv as given, less --nproc P (or --nproc=P) */
static char **mpiexec_args(const char *self, const char *np, int argc, char **argv)
{
    char **args = calloc((size_t)argc + 8, sizeof *args);
    if (!args)
        return NULL;
    int k = 0;
    args[k++] = "mpiexec";
    args[k++] = "-n";
    args[k++] = (char *)np;
    args[k++] = (char *)self;
    int flags = 1;
    for (int i = 0; i < argc; i++) {
        flags = flags && strcmp(argv[i], "--");
        if (flags && !strcmp(argv[i], "--nproc")) {
            i++; /* drop the flag and its value */
            continue;
        }
        if (flags && !strncmp(argv[i], "--nproc=", 8))
            continue;
        args[k++] = argv[i];
    }
    return args;
}

/* the environment of mpiexec and the ranks */
static void launch_env(int nproc, const char *status)
{
    /* more processes than cores, and root in containers, are normal for us */
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    if (getuid() == 0) {
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    }
    /* hwloc's OpenCL plugin would load the OpenCL drivers into mpiexec, and PoCL's LLVM
     * takes over SIGUSR1 and SIGUSR2 there, so that mpiexec no longer passes them on (the
     * ranks open their devices themselves and do not need hwloc to see them) */
    setenv("HWLOC_COMPONENTS", "-opencl", 0);
    setenv("REDCO_LAUNCHER", status, 1);
    if (!getenv("OMP_NUM_THREADS")) { /* share the cores between the processes */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        char threads[24];
        snprintf(threads, sizeof threads, "%ld", cores > nproc ? cores / nproc : 1);
        setenv("OMP_NUM_THREADS", threads, 1);
    }
}

/* the child: mpiexec in a process group of its own, deaf to SIGTERM (blocked), reading
 * nothing from the terminal, writing its stderr into the launcher's pipe, and told to end
 * the job (SIGINT) should the launcher die */
static void launch_child(char **args, pid_t parent, int err_pipe[2])
{
    setpgid(0, 0);
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, NULL);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) {
        dup2(null, 0);
        close(null);
    }
    dup2(err_pipe[1], 2);
    close(err_pipe[0]);
    close(err_pipe[1]);
    prctl(PR_SET_PDEATHSIG, SIGINT);
    if (getppid() != parent) /* the launcher died before prctl */
        _exit(128 + SIGINT);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    execvp(args[0], args);
    fprintf(stderr, "redco: --nproc: cannot start mpiexec: %s (install openmpi-bin)\n", strerror(errno));
    _exit(127);
}

/* mpiexec's stderr (the ranks' too) passed on line by line, less mpiexec's "Forwarding
 * signal 10 to job" about the launcher's own notices */
typedef struct {
    char text[8192];
    size_t used;
} relay;

static void relay_line(const char *line, size_t n)
{
    static const char ours[] = "mpiexec: Forwarding signal ", redco[] = "redco";
    if (n >= sizeof ours - 1 && !memcmp(line, ours, sizeof ours - 1))
        return;
    if (lost_host && (n < sizeof redco - 1 || memcmp(line, redco, sizeof redco - 1)))
        return;
    for (size_t done = 0; done < n;) {
        ssize_t w = write(2, line + done, n - done);
        if (w <= 0 && errno != EINTR)
            return;
        done += w > 0 ? (size_t)w : 0;
    }
}

/* reads what the pipe has (waiting up to ms); 0 at its end */
static int relay_read(relay *r, int fd, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0)
        return 1;
    ssize_t n = read(fd, r->text + r->used, sizeof r->text - r->used);
    if (n < 0)
        return errno == EINTR || errno == EAGAIN;
    if (n == 0) {
        relay_line(r->text, r->used);
        r->used = 0;
        return 0;
    }
    r->used += (size_t)n;
    size_t start = 0;
    for (size_t i = 0; i < r->used; i++)
        if (r->text[i] == '\n') {
            relay_line(r->text + start, i + 1 - start);
            start = i + 1;
        }
    if (start == 0 && r->used == sizeof r->text) /* a line longer than the buffer: as it is */
        start = r->used, relay_line(r->text, r->used);
    memmove(r->text, r->text + start, r->used - start);
    r->used -= start;
    return 1;
}

static double clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the exit status of the lowest rank that left one in the status directory (0: none), and
 * the directory removed */
static int status_take(const char *dir)
{
    int code = 0, lowest = -1;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int rank, c = 0;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!strcmp(e->d_name, "lost"))
            unlink(path);
        if (sscanf(e->d_name, "rank-%d", &rank) != 1)
            continue;
        FILE *f = fopen(path, "r");
        if (f && fscanf(f, "%d", &c) == 1 && c > 0 && c < 256 && (lowest < 0 || rank < lowest))
            lowest = rank, code = c;
        if (f)
            fclose(f);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
    return code;
}

/* a rank left "lost" in the status directory (a host cannot be reached) and mpiexec has
 * not ended LOST_GRACE_S seconds later: it is killed and waited for; 1 then */
static int lost_wait(const char *status, pid_t child)
{
    static double seen;
    char path[PATH_MAX + 8];
    if (!lost_host) {
        snprintf(path, sizeof path, "%s/lost", status);
        if (access(path, F_OK))
            return 0;
        lost_host = 1;
        seen = clock_s();
    }
    if (clock_s() - seen < LOST_GRACE_S)
        return 0;
    kill(-child, SIGKILL); /* mpiexec's process group: it and the ranks it forked here */
    waitpid(child, NULL, 0);
    return 1;
}

/* 1 when a SIGTERM sent to mpiexec waits in its blocked set (/proc/PID/status, ShdPnd: the
 * pending signals of the process, a hexadecimal mask with bit N-1 for signal N) */
static int term_pending(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned long long mask = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "ShdPnd: %llx", &mask) == 1)
            break;
    if (f)
        fclose(f);
    return (int)(mask >> (SIGTERM - 1) & 1);
}

/* waits for mpiexec, relaying its stderr and passing signals on; its exit status, as the
 * launcher's */
static int launch_wait(pid_t child, int err_fd, const char *status)
{
    static relay r;
    int passed = 0, st = 0, open_pipe = 1, killed = 0;
    double noticed = 0;
    for (;;) {
        /* a SIGTERM sent to mpiexec alone stops the job as one sent to the launcher does */
        if (!launcher_signal && term_pending(child))
            on_launcher_signal(SIGTERM);
        for (; passed < launcher_signals; passed++) {
            /* first: the stop notice for every rank; then: end the job now */
            int sig = passed == 0 ? (launcher_signal == SIGINT ? SIGUSR2 : SIGUSR1) : SIGINT;
            kill(child, sig);
            noticed = clock_s();
        }
        /* mpiexec drops a signal that comes before it started the ranks: the notice again
         * each second (a rank takes it once) */
        if (passed == 1 && clock_s() - noticed > 1.0) {
            kill(child, launcher_signal == SIGINT ? SIGUSR2 : SIGUSR1);
            noticed = clock_s();
        }
        if (open_pipe)
            open_pipe = relay_read(&r, err_fd, 100);
        else
            poll(NULL, 0, 100);
        pid_t w = waitpid(child, &st, WNOHANG);
        if (w == child)
            break;
        if (lost_wait(status, child)) {
            killed = 1;
            break;
        }
        if (w < 0 && errno != EINTR)
            return 1;
    }
    struct pollfd left = {err_fd, POLLIN, 0};
    while (open_pipe && poll(&left, 1, 0) > 0) /* what is left in the pipe, not waiting for more */
        open_pipe = relay_read(&r, err_fd, 0);
    relay_line(r.text, r.used);
    if (killed) { /* a host was lost: the status its ranks left */
        int code = status_take(status);
        return code ? code : 1;
    }
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    /* a rank's own status (also when mpiexec itself was signalled and exits 1); else
     * mpiexec's */
    int ranks = status_take(status), code = WEXITSTATUS(st);
    if (ranks)
        return ranks;
    if (launcher_signal && (code || passed > 1)) /* ended by the signals, before a fit caught them */
        code = 128 + launcher_signal;
    return code;
}

int cli_relaunch(const char *cmd, int nproc, int argc, char **argv)
{
    if (nproc <= 0 || rc_dist_launched())
        return -1;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return cli_fail(cmd, "--nproc: cannot find this program's path: %s", strerror(errno));
    self[n] = 0;
    char np[16], status[PATH_MAX];
    snprintf(np, sizeof np, "%d", nproc);
    const char *tmp = getenv("TMPDIR");
    snprintf(status, sizeof status, "%s/redco-launch-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(status))
        return cli_fail(cmd, "--nproc: cannot create the launcher's status directory %s: %s", status,
                        strerror(errno));
    char **args = mpiexec_args(self, np, argc, argv);
    if (!args) {
        rmdir(status);
        return cli_fail(cmd, "out of memory");
    }
    launch_env(nproc, status);
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_launcher_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    fflush(NULL);
    int err_pipe[2] = {-1, -1};
    pid_t parent = getpid(), child = pipe(err_pipe) ? -1 : fork();
    if (child == 0)
        launch_child(args, parent, err_pipe);
    if (err_pipe[1] >= 0)
        close(err_pipe[1]);
    int rc = child < 0 ? cli_fail(cmd, "--nproc: cannot start mpiexec: %s", strerror(errno))
                       : launch_wait(child, err_pipe[0], status);
    if (err_pipe[0] >= 0)
        close(err_pipe[0]);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    status_take(status); /* gone, also after a launcher error */
    free(args);
    return rc;
}

/* ---- the ranks' side ---------------------------------------------------------------- */

/* Before a fit catches them: the forwarded notices end the rank as the signals they stand
 * for would (nothing to save yet). */
static void on_forwarded_signal(int sig)
{
    int as = rc_dist_stop_signal(sig);
    signal(as, SIG_DFL);
    raise(as);
}

void cli_launched_signals(void)
{
    if (!rc_dist_signals_forwarded())
        return;
    signal(SIGUSR1, on_forwarded_signal);
    signal(SIGUSR2, on_forwarded_signal);
}

/* this process's rank in the job's world, from the launcher's environment (it may be read
 * after MPI is finalized) */
static int world_rank_env(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return atoi(getenv(vars[i]));
    return cli_rank;
}

int cli_exit_status(int code)
{
    if (!code || !rc_dist_signals_forwarded())
        return code;
    signal(SIGUSR1, SIG_IGN); /* the launcher repeats a stop notice until the job ends */
    signal(SIGUSR2, SIG_IGN);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/rank-%d", getenv("REDCO_LAUNCHER"), world_rank_env());
    FILE *f = fopen(path, "w");
    int bad = !f || fprintf(f, "%d\n", code) < 0;
    if ((f && fclose(f)) || bad) /* not where the launcher looks: exit with it here */
        return code;
    return 0;
}
