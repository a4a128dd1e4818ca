/*
 * rdkit_bridge.cpp - the one C++ file: everything molprop asks of RDKit,
 * behind plain C functions declared in featurize.h.  RDKit's own logging is
 * silenced; its reasons reach the user through our messages.
 */
#include "featurize/featurize.h"

#include <GraphMol/GraphMol.h>
#include <GraphMol/SmilesParse/SmilesParse.h>
#include <GraphMol/SmilesParse/SmilesWrite.h>
#include <RDGeneral/versions.h>

#include <cstring>
#include <memory>

extern "C" const char *mp_rdkit_version(void)
{
    return RDKit::rdkitVersion;
}

extern "C" char *mp_rdkit_canonical(const char *smiles)
{
    std::unique_ptr<RDKit::ROMol> mol;
    try {
        mol.reset(RDKit::SmilesToMol(smiles));
    } catch (...) {
        return nullptr;
    }
    if (!mol)
        return nullptr;
    std::string s = RDKit::MolToSmiles(*mol);
    return mp_strdup(s.c_str());
}
