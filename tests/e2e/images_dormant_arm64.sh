#!/usr/bin/env bash
# Dormant mode in a profilable arm64 image, run under qemu: images_dormant.sh
# for arm64.
DORMANT_ARCH=arm64 exec bash "$(dirname "$0")/images_dormant.sh"
