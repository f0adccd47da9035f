/**
 * @file kernel_fusion.h
 * @brief Umbrella header of libkernel_fusion: include this one.
 *
 * @mainpage KernelFusion
 * A framework-agnostic C library of fused GPU kernels with a CPU backend of the same semantics.
 * See runtime.h (contexts, streams, events, tensors), ops.h (fused operations), graph.h (the
 * fusion engine: run-time composed, generated kernels), dlpack.h
 * (zero-copy exchange) and api.h (the function table for `dlopen` hosts).
 */
#ifndef KERNEL_FUSION_H
#define KERNEL_FUSION_H

#include "kernel_fusion/api.h"
#include "kernel_fusion/dlpack.h"
#include "kernel_fusion/graph.h"
#include "kernel_fusion/ops.h"
#include "kernel_fusion/runtime.h"
#include "kernel_fusion/types.h"

#endif /* KERNEL_FUSION_H */
