// Graph memory nodes: allocation and free nodes (cuGraphAddMemAllocNode,
// cuGraphAddMemFreeNode, cuMemAllocAsync/cuMemFreeAsync captured), the
// device's graph memory pool that backs them, cuDeviceGraphMemTrim and the
// graph memory attributes. docs/sim.md "Graph memory" says which documented
// fact each rule follows and what the model chose where the documents are
// silent.
//
// The graph pool of a device is a Pool (PoolModel with a granular block, a
// release threshold no synchronize reaches) outside the program's reach:
// reserved = physical memory held for graphs (charged to the process, as
// the driver counts it), used = what mapped execs hold.

#include <algorithm>

#include "sim/driver/driver_state.h"

namespace gpuslice::sim::driver {
namespace {

// The graph pool of device `dev`, created on first use. REQUIRES: Driver::mu.
uint64_t GraphPoolLocked(int dev) {
  Driver& d = D();
  if (d.graph_pool[dev] == 0) {
    d.graph_pool[dev] = AddPool(dev, /*is_default=*/true);
    if (Pool* pl = d.pools.Get(d.graph_pool[dev])) {
      const uint64_t granularity = d.gpu->RoundToGranularity(1);
      pl->model = PoolModel(granularity, granularity);  // grows by what it lacks
      pl->model.set_release_threshold(UINT64_MAX);      // only a trim releases it
    }
  }
  return d.graph_pool[dev];
}

uint64_t GraphPool(int dev) {
  std::lock_guard lock(D().mu);
  return GraphPoolLocked(dev);
}

bool ValidDevice(CUdevice dev) { return dev >= 0 && dev < VisibleCount(); }

// The graph a node handle belongs to (node handles keep the graph's slot,
// not its generation: the live graph in that slot), and the node's index.
Graph* GraphOfNode(CUgraphNode node, uint32_t* index) {
  const uint64_t h = Raw(node);
  if ((h & 0xff) != static_cast<uint8_t>(Tag::kGraphNode) || (h >> 32) == 0) return nullptr;
  *index = static_cast<uint32_t>(h >> 32) - 1;
  const uint64_t slot = h & 0xffffff00;
  const std::vector<uint64_t> graphs = D().graphs.Find([](const Graph&) { return true; });
  for (uint64_t g : graphs) {
    if ((g & 0xffffff00) == slot) return D().graphs.Get(g);
  }
  return nullptr;
}

}  // namespace

CUresult AddGraphAlloc(uint64_t graph, int device, uint64_t bytes, CUdeviceptr* out) {
  Driver& d = D();
  Graph* g = d.graphs.Get(graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0 || device < 0 || device >= VisibleCount()) return CUDA_ERROR_INVALID_VALUE;
  // The address, fixed for the node's life: a mapping of its own (the
  // simulated kernels never touch it; copies may).
  Range r;
  r.graph = true;
  void* p = MapDeviceRange(bytes, r);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  const uint64_t rounded = d.gpu->RoundToGranularity(bytes);
  std::lock_guard lock(d.mu);
  g->allocs.push_back(
      GraphAlloc{device, rounded, bytes, g->nodes, reinterpret_cast<uintptr_t>(p), false});
  g->types.push_back(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  ++g->nodes;
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult AddGraphFree(uint64_t graph, CUdeviceptr ptr) {
  Graph* g = D().graphs.Get(graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  for (GraphAlloc& a : g->allocs) {
    if (a.address == static_cast<uintptr_t>(ptr) && !a.freed_in_graph) {
      a.freed_in_graph = true;
      g->types.push_back(CU_GRAPH_NODE_TYPE_MEM_FREE);
      ++g->nodes;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult MapGraphExec(uint64_t exec, uint64_t ctx_handle, bool launch) {
  Driver& d = D();
  GraphExec* e = d.graph_execs.Get(exec);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (e->allocs.empty()) return CUDA_SUCCESS;
  Context* ctx = d.contexts.Get(ctx_handle);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const uint64_t pool = GraphPool(e->device);
  std::lock_guard lock(d.pools_mu);
  if (launch && !e->live.empty() && !e->auto_free) return CUDA_ERROR_INVALID_VALUE;
  Pool* pl = d.pools.Get(pool);
  if (pl == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!e->mapped) {
    const uint64_t growth = pl->model.GrowthFor(e->need);
    if (growth > 0) {
      if (pl->backing_ctx == 0 || d.contexts.Get(pl->backing_ctx) == nullptr) {
        pl->backing_ctx = ctx_handle;  // the first context that grows it holds its reserve
        pl->backing_cid = ctx->id;
      }
      if (Status s = d.gpu->Allocate(pl->backing_cid, growth); !s.ok()) return FromStatus(s);
    }
    pl->model.Allocated(e->need, growth);
    e->mapped = true;
  }
  if (launch) {
    e->live.clear();
    for (const GraphAlloc& a : e->allocs) {
      if (!a.freed_in_graph) e->live.push_back(a.address);
    }
  }
  return CUDA_SUCCESS;
}

void UnmapGraphExec(GraphExec& e) {
  if (e.allocs.empty()) return;
  const uint64_t pool = GraphPool(e.device);
  std::lock_guard lock(D().pools_mu);
  if (e.mapped) {
    if (Pool* pl = D().pools.Get(pool)) pl->model.Freed(e.need);  // stays reserved
    e.mapped = false;
  }
}

void FreeGraphAlloc(uintptr_t ptr) {
  Driver& d = D();
  const std::vector<uint64_t> execs = d.graph_execs.Find([](const GraphExec&) { return true; });
  std::lock_guard lock(d.pools_mu);
  for (uint64_t h : execs) {
    if (GraphExec* e = d.graph_execs.Get(h)) std::erase(e->live, ptr);
  }
}

}  // namespace gpuslice::sim::driver

using namespace gpuslice::sim;          // NOLINT: the C entry points below
using namespace gpuslice::sim::driver;  // NOLINT

GS_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                          size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (node == nullptr || params == nullptr || (ndeps > 0 && deps == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUmemPoolProps& props = params->poolProps;
  if (props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      props.handleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Graph* g = D().graphs.Get(Raw(graph));
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr dptr = 0;
  if (CUresult rc = AddGraphAlloc(Raw(graph), props.location.id, params->bytesize, &dptr);
      rc != CUDA_SUCCESS) {
    return rc;
  }
  params->dptr = dptr;
  std::lock_guard lock(D().mu);
  *node = AsHandle<CUgraphNode>(GraphNodeHandle(Raw(graph), g->nodes - 1));
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                         size_t ndeps, CUdeviceptr dptr) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (node == nullptr || (ndeps > 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = D().graphs.Get(Raw(graph));
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = AddGraphFree(Raw(graph), dptr); rc != CUDA_SUCCESS) return rc;
  std::lock_guard lock(D().mu);
  *node = AsHandle<CUgraphNode>(GraphNodeHandle(Raw(graph), g->nodes - 1));
  return CUDA_SUCCESS;
}

// As documented: releases the graph pool's physical memory not in use:
// every exec whose allocations are all freed is unmapped (it maps again at
// its next launch), then what the pool holds beyond the rest goes back.
GS_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Driver& d = D();
  const uint64_t pool = GraphPool(dev);
  const std::vector<uint64_t> execs =
      d.graph_execs.Find([&](const GraphExec& e) { return e.device == dev; });
  std::lock_guard lock(d.pools_mu);
  Pool* pl = d.pools.Get(pool);
  if (pl == nullptr) return CUDA_SUCCESS;
  for (uint64_t h : execs) {
    GraphExec* e = d.graph_execs.Get(h);
    if (e != nullptr && e->mapped && e->live.empty()) {
      pl->model.Freed(e->need);
      e->mapped = false;
    }
  }
  ReleasePoolBacking(*pl, pl->model.TrimTo(0));
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr,
                                                void* value) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t pool = GraphPool(dev);
  std::lock_guard lock(D().pools_mu);
  const Pool* pl = D().pools.Get(pool);
  if (pl == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      *out = pl->model.used();
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      *out = pl->model.used_high();
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      *out = pl->model.reserved();
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      *out = pl->model.reserved_high();
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// The high watermarks "can only be reset to zero": 0 resets one to the
// current value, anything else is INVALID_VALUE.
GS_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr,
                                                void* value) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr || *static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t pool = GraphPool(dev);
  std::lock_guard lock(D().pools_mu);
  Pool* pl = D().pools.Get(pool);
  if (pl == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      pl->model.ResetUsedHigh();
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      pl->model.ResetReservedHigh();
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

GS_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Graph* g = D().graphs.Get(Raw(graph));
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  if (nodes != nullptr) {
    for (uint32_t i = 0; i < g->nodes && i < *count; ++i) {
      nodes[i] = AsHandle<CUgraphNode>(GraphNodeHandle(Raw(graph), i));
    }
  }
  *count = g->nodes;
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  uint32_t index = 0;
  const Graph* g = GraphOfNode(node, &index);
  if (g == nullptr || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  if (index >= g->types.size()) return CUDA_ERROR_INVALID_VALUE;
  *type = g->types[index];
  return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* out) {
  if (CUresult rc = Ready(); rc != CUDA_SUCCESS) return rc;
  uint32_t index = 0;
  const Graph* g = GraphOfNode(node, &index);
  if (g == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(D().mu);
  for (const GraphAlloc& a : g->allocs) {
    if (a.node != index) continue;
    *out = CUDA_MEM_ALLOC_NODE_PARAMS{};
    out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    out->poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, a.device};
    out->bytesize = a.requested;
    out->dptr = a.address;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}
