/* Each rank prints its rank, the world size and the sum of all ranks (an MPI_Allreduce), so
 * a test can check that every rank joined one world (crates/tandem/tests/clients.rs). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank, size, sum, len;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const char *node = getenv("SLURMD_NODENAME");
    printf("rank %d of %d sum %d node %s\n", rank, size, sum, node ? node : "?");
    MPI_Finalize();
    return 0;
}
