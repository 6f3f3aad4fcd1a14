/*
 * The pool's locks as the C append takes them: as LockSet.acquire and
 * release do (shm/locks.py, the reference), intent byte, semaphore, owner
 * record, with brief spinning and never a blocking wait (busy: the caller
 * falls back to Python). Under SHMKAFKA_LOCKDEP=1 every take and drop is told
 * to shm/lockdep.py, which checks the one lock order and names the C call
 * site. Part of the _append extension (_append_internal.h).
 *
 * The style is CPython's (PEP 7).
 */
#include "_append_internal.h"

/* Tell lockdep (shm/lockdep.py) of a take at `site`, before it is tried:
 * 0, or -1 with LockOrderError set when it goes against the lock order. */
static int
lockdep_acquiring(FastAppend *self, Py_ssize_t index, const char *site)
{
    PyObject *r = PyObject_CallMethod(self->lockdep, "acquiring", "ns",
                                      index, site);

    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static void
lockdep_released(FastAppend *self, Py_ssize_t index)
{
    PyObject *r = PyObject_CallMethod(self->lockdep, "released", "n", index);

    if (r == NULL) {
        PyErr_WriteUnraisable(self->lockdep);
    }
    Py_XDECREF(r);
}

/* Take pool lock ``index`` as LockSet.acquire does (intent byte, semaphore,
 * owner record), spinning briefly: 1 when taken, 0 when busy (the caller
 * falls back to Python), -1 with an exception set when lockdep refuses it.
 * Use TAKE_LOCK, which names the call site. */
int
take_lock(FastAppend *self, Py_ssize_t index, sem_t *sem, const char *site)
{
    char *buf = (char *)self->view.buf;
    char *intent = buf + self->intent_at0 + index;

    if (self->lockdep != NULL && lockdep_acquiring(self, index, site) < 0) {
        return -1;
    }
    if (*intent) {
        if (self->lockdep != NULL) {
            lockdep_released(self, index);
        }
        return 0;  /* another thread of this process holds or wants it */
    }
    *intent = 1;
    /* Critical sections last about a microsecond: spin briefly before giving
     * up to the slow path, whose blocking wait costs a context switch. */
    for (int spin = 0; spin < SPIN_TRIES; spin++) {
        if (sem_trywait(sem) == 0) {
            char *owner = buf + self->locks_at + index * self->lock_stride;

            wr32(owner + self->lock_owner_slot, (uint32_t)self->slot);
            wr32(owner + self->lock_owner_pid, (uint32_t)self->pid);
            wr64(owner + self->lock_owner_start, (uint64_t)self->started);
            return 1;
        }
        cpu_relax();
    }
    *intent = 0;
    if (self->lockdep != NULL) {
        lockdep_released(self, index);
    }
    return 0;
}

void
drop_lock(FastAppend *self, Py_ssize_t index, sem_t *sem)
{
    char *buf = (char *)self->view.buf;
    char *owner = buf + self->locks_at + index * self->lock_stride;

    wr32(owner + self->lock_owner_slot, (uint32_t)-1);
    wr32(owner + self->lock_owner_pid, 0);
    wr64(owner + self->lock_owner_start, 0);
    sem_post(sem);
    buf[self->intent_at0 + index] = 0;
    if (self->lockdep != NULL) {
        lockdep_released(self, index);
    }
}
