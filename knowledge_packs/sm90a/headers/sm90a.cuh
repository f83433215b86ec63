// sm90a.cuh - the whole ptxgym Hopper (sm_90a) wrapper set in one include.
#pragma once

#include "common.cuh"
#include "mbarrier.cuh"
#include "cluster.cuh"
#include "tma.cuh"
#include "tma_host.cuh"
#include "wgmma.cuh"
#include "matrix.cuh"
