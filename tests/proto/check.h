/* check.h: the assertion helpers of the proto tests: tests/kernels/check.h's
 * CHECK (a failure line reads "check failed"), which records a failure with
 * its location and carries on, so one run reports every broken case; and
 * check_exit, check_exit_code under the name the proto tests use, which turns
 * the count into the exit status meson reads. */
#ifndef HFL_TESTS_PROTO_CHECK_H
#define HFL_TESTS_PROTO_CHECK_H

#define CHECK_FAILED_TEXT "check failed"
#include "../kernels/check.h"

#define check_exit check_exit_code

#endif
