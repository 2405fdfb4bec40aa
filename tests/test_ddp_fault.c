/* tests/test_ddp_fault.c — a rank that dies, stalls or fails during DDP never leaves the others
 * hanging: `mpirun -np 2 glia train` ends, non-zero, soon after [distributed] timeout_s, or at once
 * when the rank saw an error, with a message naming the cause; ranks started with different
 * settings are refused; SIGTERM to one rank stops all with one exit status. Runs the real CLI; the
 * fault fixture layer plays the rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "build-config.h"
#include "testutil.h"
#include "internal.h"

static char dir[512];

/* The data and how.ini: a small MLP under ddp over mpi with timeout_s = 3, and unless how is
 * "none" the fault layer making rank 1 fail that way at its 4th step. */
static void make_files(const char *how)
{
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("ddp-fault"));
    char cmd[1200], a[600], b[600], fault[200] = "";
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CU_ASSERT_FATAL(system(cmd) == 0);
    snprintf(a, sizeof a, "%s/tri", dir);
    snprintf(b, sizeof b, "%s/trl", dir);
    CU_ASSERT_FATAL(glia_test_write_idx(a, b, 512, 6, 6, 5, 11) == 0);
    const char *fx = glia_test_fixtures();
    if (strcmp(how, "none")) snprintf(fault, sizeof fault, "[fault]\ntype = fault\nrank = 1\nstep = 4\nhow = %s\n", how);
    snprintf(a, sizeof a, "%s/%s.ini", dir, how);
    FILE *f = fopen(a, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f,
            "[runtime]\ndevice = cpu\n[plugins]\nload = %s/fault.so\n"
            "[data]\ntrain_images = tri\ntrain_labels = trl\ntest_images = tri\ntest_labels = trl\nbatch_size = 8\n"
            "[distributed]\nmode = ddp\ntransport = mpi\ntimeout_s = 3\n"
            "[train]\nepochs = 1\nlr = 0.05\n"
            "[flat]\ntype = flatten\n%s"
            "[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
            fx, fault);
    CU_ASSERT_FATAL(fclose(f) == 0);
}

/* Runs `mpirun --oversubscribe ARGS` in dir (bounded by an outer 120 s timeout; %s in args is the
 * glia program); returns its exit status, *secs its duration and out what it printed. */
static int run_mpi(const char *args, double *secs, char *out, size_t n)
{
    char cmd[4096], full[2048];
    const char *bin = getenv("GLIA_BIN");
    snprintf(full, sizeof full, args, bin, bin);
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 120 %s --allow-run-as-root --oversubscribe %s 2>&1", dir, GLIA_MPIRUN, full);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);  /* as tests/mpiutil.h */
    double t0 = glia__now();
    FILE *p = popen(cmd, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    size_t k = fread(out, 1, n - 1, p);
    out[k] = '\0';
    int status = pclose(p);
    *secs = glia__now() - t0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* `mpirun -np 2 glia train how.ini` with the fault `how` on rank 1. */
static int run_job(const char *how, double *secs, char *out, size_t n)
{
    make_files(how);
    char args[200];
    snprintf(args, sizeof args, "-np 2 %%s train %s.ini", how);
    return run_mpi(args, secs, out, n);
}

/* A stalled rank: the other one gives up after timeout_s and says why. */
static void test_stalled_rank_times_out(void)
{
    char out[16384];
    double s;
    int rc = run_job("stall", &s, out, sizeof out);
    if (rc == 0 || !strstr(out, "within 3")) printf("\n  exit %d after %.1f s:\n%s\n", rc, s, out);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    CU_ASSERT_NOT_EQUAL(rc, 124);        /* not ended by the outer timeout */
    CU_ASSERT(s < 60);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "within 3"));  /* "... did not finish within 3 s ..." */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "rank 0"));
}

/* A killed rank: the job ends (the launcher or the timeout stops the other rank). */
static void test_killed_rank_ends_the_job(void)
{
    char out[16384];
    double s;
    int rc = run_job("kill", &s, out, sizeof out);
    bool said = strstr(out, "signal 9") || strstr(out, "Killed") || strstr(out, "within 3");
    if (rc == 0 || !said) printf("\n  exit %d after %.1f s:\n%s\n", rc, s, out);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    CU_ASSERT_NOT_EQUAL(rc, 124);
    CU_ASSERT(s < 60);
    CU_ASSERT(said);
}

/* A data file only rank 1 lacks: rank 1 says so in its one line and ends the whole job at once
 * (through the transport's abort), instead of rank 0 waiting for it in its first collective until
 * timeout_s (here 300 s: without the abort the outer timeout ends the run). */
static void test_failing_rank_ends_the_job(void)
{
    char out[16384];
    double s;
    make_files("none");
    int rc = run_mpi("-np 1 %s train none.ini --set distributed.timeout_s=300 : "
                     "-np 1 %s train none.ini --set distributed.timeout_s=300 --set data.train_images=missing-file",
                     &s, out, sizeof out);
    bool said = strstr(out, "glia: cannot open") && strstr(out, "missing-file");
    if (rc == 0 || rc == 124 || !said) printf("\n  exit %d after %.1f s:\n%s\n", rc, s, out);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    CU_ASSERT_NOT_EQUAL(rc, 124);  /* not ended by the outer timeout */
    CU_ASSERT(said);
}

/* Different settings on one rank (the CLI's --set): both ranks refuse at start, naming the key,
 * the values and the ranks. */
static void test_different_settings_refused(void)
{
    char out[16384];
    double s;
    make_files("none");
    int rc = run_mpi("-np 1 %s train none.ini : -np 1 %s train none.ini --set train.lr=0.1", &s, out, sizeof out);
    bool said = strstr(out, "[train] lr: ranks 0 and 1 differ (0.05 vs 0.1)") != NULL;
    if (rc == 0 || rc == 124 || !said) printf("\n  exit %d after %.1f s:\n%s\n", rc, s, out);
    CU_ASSERT_NOT_EQUAL(rc, 0);
    CU_ASSERT_NOT_EQUAL(rc, 124);
    CU_ASSERT(said);
}

/* SIGTERM to rank 1 only: both ranks stop at the same step (the 10th, where they agree) and both
 * exit with 128 + SIGTERM, the signalled rank and the other alike. Each rank's status is written
 * by a shell around it, so that no rank's exit ends the job under the other. */
static void test_sigterm_on_one_rank(void)
{
    char out[16384], path[700];
    double s;
    make_files("term");
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/status.%d", dir, r);
        remove(path);
    }
    int rc = run_mpi("-np 2 sh -c '\"%s\" train term.ini; echo $? > status.$OMPI_COMM_WORLD_RANK'", &s, out, sizeof out);
    int status[2] = {-1, -1};
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/status.%d", dir, r);
        FILE *f = fopen(path, "r");
        if (!f || fscanf(f, "%d", &status[r]) != 1) status[r] = -1;
        if (f) fclose(f);
    }
    const char *stop = strstr(out, "interrupted at step 10");
    bool both = stop && strstr(stop + 1, "interrupted at step 10");
    if (rc || status[0] != 143 || status[1] != 143 || !both)
        printf("\n  exit %d after %.1f s, ranks %d and %d:\n%s\n", rc, s, status[0], status[1], out);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(status[0], 143);
    CU_ASSERT_EQUAL(status[1], 143);
    CU_ASSERT(both);
}

int main(void)
{
#ifndef GLIA_MPIRUN
    printf("skipped: this build has no mpirun\n");
    return 77;
#else
    static const struct glia_test tests[] = {GLIA_TEST(test_stalled_rank_times_out), GLIA_TEST(test_killed_rank_ends_the_job),
                                             GLIA_TEST(test_failing_rank_ends_the_job),
                                             GLIA_TEST(test_different_settings_refused),
                                             GLIA_TEST(test_sigterm_on_one_rank)};
    return glia_test_run("ddp_fault", tests, 5);
#endif
}
