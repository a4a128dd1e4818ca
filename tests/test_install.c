/*
 * test_install.c - the library as it is installed: `make install` into a
 * scratch prefix, and examples/train_predict.c built against it through
 * pkg-config and run (tests/install_example.sh does the work).
 */
#include "test.h"
#include "molprop.h"

#include <stdlib.h>
#include <sys/wait.h>

MP_TEST(install_and_build_the_example_with_pkg_config)
{
    if (!getenv("MOLPROP_MAKEVARS"))
        MP_SKIP("MOLPROP_MAKEVARS is not set (run the tests through make test)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "sh tests/install_example.sh '%s' '%s' 2>&1", mp_test_tmpdir(),
             mp_test_shared("datasets/esol.csv.gz"));
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    static char out[1 << 16];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    while (fgetc(p) != EOF)
        ;
    int status = pclose(p);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    CHECK_MSG(rc == 0, "install_example.sh exited %d:\n%s", rc, out);
    /* the example trained and predicted: four molecules, the last invalid */
    CHECK_MSG(strstr(out, "trained on 902 molecules: test rmse "), "%s", out);
    CHECK(strstr(out, "\nCCO ") && strstr(out, "logSolubility: -"));
    CHECK(strstr(out, "not a molecule            logSolubility: invalid"));
    CHECK(strstr(out, "install_example: ok") != NULL);
}
