/* A bare PMIx client: PMIx_Init against the server its PMIX_* variables name, "init ok" or
 * "init failed: why" (crates/tandem/tests/hostile.rs, as another user). */
#include <pmix.h>
#include <stdio.h>

int main(void) {
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        printf("init failed: %s\n", PMIx_Error_string(rc));
        return 1;
    }
    printf("init ok: %s rank %u\n", me.nspace, me.rank);
    PMIx_Finalize(NULL, 0);
    return 0;
}
