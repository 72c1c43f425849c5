// Everything in pig::ref, the scalar reference: include this one header.
#pragma once

#include "pig/reference/attention.h"
#include "pig/reference/hybrid.h"
#include "pig/reference/lsh.h"
#include "pig/reference/magicpig.h"
#include "pig/reference/matrix.h"
#include "pig/reference/quest.h"
#include "pig/reference/random.h"
#include "pig/reference/synthetic.h"
#include "pig/reference/transform.h"
