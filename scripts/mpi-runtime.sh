#!/usr/bin/env bash
# Packs this machine's Open MPI (Debian's openmpi-bin, PMIx 4) into one relocatable directory for a
# machine that has none, such as the GPU machine (scripts/gpu-bundle.sh --hosts): mpirun, the
# libraries, the components (only those whose libraries come along: no UCX, OFI, verbs or PSM,
# so shared memory and TCP), help texts and the MCA defaults, cuda-support (whether this Open MPI
# moves device memory itself: Debian's does not), and env.sh, which points Open MPI and PMIx at
# the directory wherever it lies:
#   scripts/mpi-runtime.sh OUT_DIR
#   . OUT_DIR/env.sh && mpirun --allow-run-as-root -n 2 BINARY ...
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/mpi-runtime.sh OUT_DIR" >&2; exit 2; }
out=$1
[ "$(uname -s)" = Linux ] || { echo "mpi-runtime.sh: Linux only (ldd, Debian's Open MPI)" >&2; exit 1; }
orterun=$(readlink -f "$(command -v mpirun || true)")  # lint-portable: ok (Linux only)
[ -x "$orterun" ] || { echo "mpi-runtime.sh: no mpirun here (scripts/setup.sh installs Open MPI)" >&2; exit 1; }
ompi=$(ompi_info --path libdir --parsable | sed -n 's/^path:libdir://p')
plugins=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
help=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
conf=$(ompi_info --path sysconfdir --parsable | sed -n 's/^path:sysconfdir://p')
pmix=$(readlink -f "$(ldd "$plugins/mca_pmix_ext3x.so" | awk '/libpmix\.so/ {print $3}')")  # lint-portable: ok (Linux only)
pmix_prefix=$(dirname "$(dirname "$pmix")")
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib" "$out/plugins" "$out/pmix/lib/pmix" "$out/share" "$out/etc"
cp "$orterun" "$out/bin/mpirun"

# What every Linux with glibc has (the GPU machine's Ubuntu 24.04 among them): not carried.
base='^lib(c|m|dl|pthread|rt|z|gcc_s|stdc\+\+|util|resolv)\.so|^ld-linux'
# carry FILE: copies the shared libraries FILE loads that are not the base's; fails (status 1)
# when one is missing on this machine or is a network stack we leave out.
leave_out='^lib(ucp|uct|ucs|ucm|fabric|ibverbs|psm_infinipath|psm2|rdmacm|mlx|hcoll|cuda|knem|xpmem|slurm|pbs|lustre|gpfs|sharp)'
carry() {
  local deps
  deps=$(ldd "$1" | awk '/=>/ {print $1, $3}') || return 1
  if printf '%s\n' "$deps" | grep -qE "not$|^($leave_out)"; then return 1; fi
  printf '%s\n' "$deps" | while read -r name path; do
    [[ $name =~ $base ]] && continue
    [ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done
}
carry "$orterun"
carry "$ompi/libmpi.so"
cp -L "$ompi/libmpi.so" "$out/lib/libmpi.so.40"
for component in "$plugins"/mca_*.so; do
  if carry "$component"; then cp "$component" "$out/plugins/"; fi
done
for component in "$pmix_prefix"/lib/pmix/*.so; do
  if carry "$component"; then cp "$component" "$out/pmix/lib/pmix/"; fi
done
cp -r "$help" "$out/share/openmpi"
[ -d "$pmix_prefix/share/pmix" ] && cp -r "$pmix_prefix/share/pmix" "$out/pmix/share-pmix"
cp "$conf"/openmpi-mca-params.conf "$out/etc/" 2>/dev/null || true
ompi_info --parsable --all | sed -n 's/^mca:opal:base:param:opal_built_with_cuda_support:value://p' > "$out/cuda-support"
cat > "$out/env.sh" <<'ENV'
# Sourced: points Open MPI and PMIx at this directory (made by scripts/mpi-runtime.sh).
mpi_runtime=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX=$mpi_runtime OPAL_BINDIR=$mpi_runtime/bin OPAL_LIBDIR=$mpi_runtime/lib
export OPAL_PKGLIBDIR=$mpi_runtime/plugins OPAL_PKGDATADIR=$mpi_runtime/share/openmpi OPAL_SYSCONFDIR=$mpi_runtime/etc
export PMIX_PREFIX=$mpi_runtime/pmix PMIX_MCA_mca_base_component_path=$mpi_runtime/pmix/lib/pmix
# PMIx adds that path to its built-in one: a machine with another PMIx there (the GPU machine has
# one) offers components of another version, which fail to load and are skipped; say nothing of
# them, nor of the compression they would have given (start-up messages only).
export PMIX_MCA_mca_base_component_show_load_errors=0 PMIX_MCA_pcompress_base_silence_warning=1
export PATH=$mpi_runtime/bin:$PATH LD_LIBRARY_PATH=$mpi_runtime/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ENV
echo "mpi-runtime.sh: $(ls "$out/plugins" | wc -l | tr -d ' ') components, $(ls "$out/lib" | wc -l | tr -d ' ') libraries, $(du -sh "$out" | cut -f1) in $out"
