/* check.h: tests/check.h under the name tests/proto/fuzz_msg.c includes it
 * by, with check_exit for check_exit_code. Only fuzz_msg.c uses this file:
 * new tests include "tests/check.h" itself. */
#ifndef HFL_TESTS_PROTO_CHECK_H
#define HFL_TESTS_PROTO_CHECK_H

#include "tests/check.h"

#define check_exit check_exit_code

#endif
