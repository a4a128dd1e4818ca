/*
 * parse_rate.cpp - the bare RDKit SMILES-parse rate, the yardstick for
 * featurization speed: reads the first column of a CSV (plain or gzipped),
 * then times RDKit::SmilesToMol (sanitize, remove H: what Chemprop v1 does)
 * over all of it, with no features computed.
 *
 *   build/bench/parse_rate FILE.csv[.gz] [THREADS]
 */
#include <GraphMol/GraphMol.h>
#include <GraphMol/SmilesParse/SmilesParse.h>

#include <omp.h>
#include <zlib.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char **argv)
{
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s FILE.csv[.gz] [THREADS]\n", argv[0]);
        return 1;
    }
    int threads = argc > 2 ? std::atoi(argv[2]) : 1;
    gzFile gz = gzopen(argv[1], "rb");
    if (!gz) {
        std::fprintf(stderr, "cannot open %s\n", argv[1]);
        return 1;
    }
    std::vector<std::string> smiles;
    std::vector<char> line(1 << 20);
    bool header = true;
    while (gzgets(gz, line.data(), (int)line.size())) {
        if (header) {
            header = false;
            continue;
        }
        size_t n = std::strcspn(line.data(), ",\r\n");
        smiles.emplace_back(line.data(), n);
    }
    gzclose(gz);
    long valid = 0;
    auto t0 = std::chrono::steady_clock::now();
    struct timespec c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 32) reduction(+ : valid)
    for (long i = 0; i < (long)smiles.size(); i++) {
        RDKit::SmilesParserParams params;   /* sanitize + removeHs by default */
        try {
            std::unique_ptr<RDKit::RWMol> mol(RDKit::SmilesToMol(smiles[(size_t)i], params));
            valid += mol != nullptr;
        } catch (...) {
        }
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    /* molecules_per_cpu_s: the per-core rate, which a shared machine's load
     * leaves alone (as long as the caches are not thrashed) */
    std::printf("parse_rate file=%s threads=%d molecules=%zu valid=%ld seconds=%.3f "
                "molecules_per_s=%.0f cpu_seconds=%.3f molecules_per_cpu_s=%.0f\n",
                argv[1], threads, smiles.size(), valid, s, (double)smiles.size() / s, cpu,
                (double)smiles.size() / cpu);
    return 0;
}
