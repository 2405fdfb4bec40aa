/* tests/mpiutil.h — the harness of the multi-process test programs: run under `make check`, a
 * program starts itself again as N ranks through mpirun; each rank runs the CUnit suite, rank 0
 * prints to stdout, rank r > 0 to $GLIA_TMPDIR/<program>.rank<r>.log. Not a launcher for users. */
#ifndef GLIA_MPIUTIL_H
#define GLIA_MPIUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "build-config.h"
#include "testutil.h"

/* This process's rank and the world size from the launcher's environment (Open MPI, MPICH/PMI,
 * Slurm); -1 when not started by a launcher. */
static inline int mpi_env_int(const char *const *names)
{
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return -1;
}
static inline int mpi_env_rank(void)
{
    static const char *const n[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", NULL};
    return mpi_env_int(n);
}
static inline int mpi_env_world(void)
{
    static const char *const n[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
    return mpi_env_int(n);
}

/* argv[0] again as `ranks` processes: returns only on failure (exit status 77: no launcher). */
static inline int mpi_relaunch(char **argv, int ranks)
{
#ifndef GLIA_MPIRUN
    (void)argv;
    (void)ranks;
    printf("skipped: this build has no mpirun (install openmpi-bin and libopenmpi-dev, then configure again)\n");
    return 77;
#else
    char np[16];
    snprintf(np, sizeof np, "%d", ranks);
    char *args[] = {(char *)GLIA_MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", np, argv[0], NULL};
    fflush(stdout);
    /* containers often forbid the cross-process reads of Open MPI's shared-memory fast path */
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
    execv(GLIA_MPIRUN, args);
    perror("exec " GLIA_MPIRUN);
    return 1;
#endif
}

/* In a rank: rank r > 0 writes its output to a file of its own. */
static inline void mpi_rank_output(const char *prog, int rank)
{
    if (rank <= 0) return;
    const char *base = strrchr(prog, '/');
    char name[256];
    snprintf(name, sizeof name, "%s.rank%d.log", base ? base + 1 : prog, rank);
    if (!freopen(glia_test_tmp(name), "w", stdout)) perror("freopen");
}

/* main() of a test program run as `ranks` processes. */
#define GLIA_MPI_TEST_MAIN(suite, ranks, ...)                                                  \
    int main(int argc, char **argv)                                                           \
    {                                                                                         \
        (void)argc;                                                                           \
        if (mpi_env_world() < 0) return mpi_relaunch(argv, ranks);                            \
        mpi_rank_output(argv[0], mpi_env_rank());                                             \
        static const struct glia_test tests_[] = {__VA_ARGS__};                              \
        return glia_test_run(suite, tests_, (int)(sizeof tests_ / sizeof tests_[0]));         \
    }

#endif
