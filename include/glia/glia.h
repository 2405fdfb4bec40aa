/* glia/glia.h — the umbrella header of the glia SDK: include this one.
 * Not an implementation header: the parts below are the whole public interface. */
#ifndef GLIA_GLIA_H
#define GLIA_GLIA_H

#include "version.h"
#include "status.h"
#include "log.h"
#include "tensor.h"
#include "backend.h"
#include "config.h"
#include "layer.h"
#include "expr.h"
#include "optimizer.h"
#include "comm.h"
#include "plugin.h"
#include "model.h"

#endif
