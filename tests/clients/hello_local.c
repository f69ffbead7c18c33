/* hello_allreduce.c's line with the number of ranks that share the rank's node (from
 * MPI_COMM_TYPE_SHARED, which Open MPI builds from PMIx's locality), for srun --mpi=pmix
 * (crates/tandem/tests/clients.rs). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, size, sum, local;
    MPI_Comm node;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (argc > 1 && rank == atoi(argv[1]))
        MPI_Abort(MPI_COMM_WORLD, 3);
    const char *name = getenv("SLURMD_NODENAME");
    printf("rank %d of %d sum %d local %d node %s\n", rank, size, sum, local, name ? name : "?");
    MPI_Finalize();
    return 0;
}
