/* rng.c - counter-based random numbers: a key is a seed and a counter, every draw a
 * hash of both, so streams are reproducible and can be split (folded) per step, per
 * data-parallel rank or per layer without any shared state. */
#include "internal.h"

#include <math.h>

rc_rng rc_rng_new(uint64_t seed)
{
    rc_rng r = {rci_hash64(seed), 0};
    return r;
}

rc_rng rc_rng_fold(rc_rng r, uint64_t data)
{
    rc_rng out = {rci_hash64(r.key ^ rci_hash64(data + 0x632BE59BD9B4E019ull) ^ rci_hash64(r.counter)), 0};
    return out;
}

uint64_t rc_rng_next_u64(rc_rng *r)
{
    return rci_hash64(r->key ^ rci_hash64(r->counter++));
}

double rc_rng_uniform(rc_rng *r)
{
    return (double)(rc_rng_next_u64(r) >> 11) * 0x1.0p-53;
}

double rc_rng_normal(rc_rng *r)
{
    /* Box-Muller; u1 in (0, 1] keeps the log finite */
    double u1 = 1.0 - rc_rng_uniform(r);
    double u2 = rc_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double rc_rng_uniform_at(uint64_t key, uint64_t i)
{
    return (double)(rci_hash64(key ^ rci_hash64(i)) >> 11) * 0x1.0p-53;
}
