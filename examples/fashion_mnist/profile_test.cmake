# Test of fashion_mnist --profile-steps, run by ctest as
#   cmake -DFASHION_MNIST=<exe> -DCHECK_TRACE=<trainpack_check_trace> -DLOGDIR=<dir>
#         -P profile_test.cmake
# Two epochs of 3 steps with --profile-steps 2:4 (a window across the epoch end) write exactly
# chrome-trace-2.json, -3 and -4 into the log directory, each of which passes the strict Trace
# Event Format check (trainpack_check_trace) and holds the model's operators; the log says where
# the first one is. Bad values of the flag exit with status 2 and a message naming the flag,
# before the log directory is touched. (speedscope_test.sh then reads the traces with speedscope.)
if(NOT FASHION_MNIST OR NOT CHECK_TRACE OR NOT LOGDIR)
  message(FATAL_ERROR
    "profile_test.cmake: pass -DFASHION_MNIST=<program> -DCHECK_TRACE=<checker> -DLOGDIR=<dir>")
endif()

function(expect_in haystack needle what)
  string(FIND "${haystack}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what} lacks '${needle}':\n${haystack}")
  endif()
endfunction()

file(REMOVE_RECURSE ${LOGDIR})
set(form "--profile-steps: must be A:B, global steps from A to B inclusive with 1 <= A <= B")
foreach(case "0:3|; the first step is 1, got 0:3" "5:3|; A is after B in 5:3"
             "4|, got '4'" "a:b|, got 'a:b'" "-1:2|, got '-1:2'")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 value)
  list(GET parts 1 detail)
  execute_process(COMMAND ${FASHION_MNIST} --logdir ${LOGDIR} --profile-steps ${value}
    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 2)
    message(FATAL_ERROR "fashion_mnist --profile-steps ${value} exited with ${status}, expected 2:\n${out}${err}")
  endif()
  expect_in("${out}${err}" "${form}" "the output of fashion_mnist --profile-steps ${value}")
  expect_in("${out}${err}" "${detail}" "the output of fashion_mnist --profile-steps ${value}")
endforeach()
if(EXISTS ${LOGDIR})
  message(FATAL_ERROR "fashion_mnist created ${LOGDIR} although --profile-steps was refused")
endif()

execute_process(
  COMMAND ${FASHION_MNIST} --train-limit 96 --val-limit 64 --batch-size 32 --max-epoch 2
          --threads 1 --max-val-error 1 --profile-steps 2:4 --logdir ${LOGDIR}
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "fashion_mnist exited with status ${status}")
endif()
file(GLOB traces RELATIVE ${LOGDIR} ${LOGDIR}/chrome-trace-*)
list(SORT traces)
if(NOT traces STREQUAL "chrome-trace-2.json;chrome-trace-3.json;chrome-trace-4.json")
  message(FATAL_ERROR "expected chrome-trace-2.json, -3 and -4 in ${LOGDIR}, found: ${traces}")
endif()
file(READ ${LOGDIR}/log.log log)
expect_in("${log}" "[GraphProfiler] wrote ${LOGDIR}/chrome-trace-2.json" "log.log")
execute_process(
  COMMAND ${CHECK_TRACE} --expect aten::conv2d --expect aten::batch_norm --expect aten::addmm
          --expect "autograd::engine::evaluate_function: ConvolutionBackward0"
          ${LOGDIR}/chrome-trace-2.json ${LOGDIR}/chrome-trace-3.json ${LOGDIR}/chrome-trace-4.json
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the traces fail the Trace Event Format check (status ${status})")
endif()
