# Tests of the fashion_mnist program, run by ctest as
#   cmake -DFASHION_MNIST=<exe> -DLOGDIR=<dir> -DMODE=<smoke|missing_data|help> -P smoke_test.cmake
#
# smoke: two short epochs on a few hundred images end to end (no quality check), then what it
#   wrote: exit status 0, stats.json with one entry per epoch holding the validation stats and
#   the learning rate of the schedule, log.log with the final verdict, one event file, the
#   checkpoints of both epochs with the `checkpoint` index naming the last, MinSaver's copy.
#   (resume_test.sh tests resuming.)
# smoke_bf16: the same with --precision bf16, and log.log saying that the tower ran in bfloat16.
# missing_data: --data /nonexistent fails (non-zero status) with the message that names the
#   Debian package, before touching the log directory.
# help: --help lists the flags the README documents.
# bad_flags: values that are not what a flag takes (nan, inf, -1 for the seed, 1e3 for a count,
#   0 epochs, --threads above the hardware threads without --oversubscribe; as one of 2 ranks: an
#   odd --batch-size, --threads 2 per rank on 2 cores, and a bad WORLD_SIZE) exit with status 2
#   and a message naming the flag (or variable) and its bounds in words, before touching the log
#   directory; with --oversubscribe, --threads above the hardware threads is accepted.
if(NOT FASHION_MNIST OR NOT LOGDIR OR NOT MODE)
  message(FATAL_ERROR
    "smoke_test.cmake: pass -DFASHION_MNIST=<program> -DLOGDIR=<dir> -DMODE=<smoke|smoke_bf16|missing_data|help|bad_flags>")
endif()

function(expect_in haystack needle what)
  string(FIND "${haystack}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what} lacks '${needle}':\n${haystack}")
  endif()
endfunction()

# Reads key `key` of entry `index` of the stats.json text `json` into `out`; fails if absent.
function(stat out json index key)
  string(JSON value ERROR_VARIABLE err GET "${json}" ${index} "${key}")
  if(err)
    message(FATAL_ERROR "stats.json entry ${index} has no '${key}' (${err}):\n${json}")
  endif()
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

if(CMAKE_VERSION VERSION_LESS 3.19)
  message(FATAL_ERROR "smoke_test.cmake needs CMake 3.19 or newer (string(JSON)); this is "
                      "${CMAKE_VERSION}")
endif()
file(REMOVE_RECURSE ${LOGDIR})

if(MODE STREQUAL "help")
  execute_process(COMMAND ${FASHION_MNIST} --help
    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "fashion_mnist --help exited with status ${status}:\n${out}${err}")
  endif()
  foreach(flag --logdir --max-epoch --steps-per-epoch --batch-size --lr --seed --data --threads
               --train-limit --val-limit --max-val-error --malloc --blas-threads --resume
               --no-resume --dist-timeout --oversubscribe --profile-steps --precision --device
               --cuda-graph --console-file)
    expect_in("${out}" "${flag}" "the output of --help")
  endforeach()
  return()
endif()

if(MODE STREQUAL "bad_flags")
  cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
  math(EXPR too_many "${cores} + 1")
  set(cases
    "--lr|nan|--lr: must be a finite number above 0, got 'nan'"
    "--lr|inf|--lr: must be a finite number above 0, got 'inf'"
    "--lr|-1|--lr: must be a finite number above 0, got -1"
    "--weight-decay|nan|--weight-decay: must be a finite number of at least 0, got 'nan'"
    "--max-val-error|nan|--max-val-error: must be a finite number from 0 to 1, got 'nan'"
    "--max-val-error|1.5|--max-val-error: must be a finite number from 0 to 1, got 1.5"
    "--seed|-1|--seed: must be a whole number from 0 to 18446744073709551615, got '-1'"
    "--batch-size|1e3|--batch-size: must be a whole number from 1 to 1000000000, got '1e3'"
    "--max-epoch|0|--max-epoch: must be a whole number from 1 to 1000000000, got 0"
    "--precision|half|--precision: unknown precision 'half'"
    "--precision|fp16|float16 mixed precision needs a CUDA device (LibTorch's CPU autocast has no float16 kernels)"
    "--threads|${too_many}|--threads: ${too_many} is more than the ${cores} hardware threads"
    "--device|tpu|--device: must be cpu, cuda or cuda:N (N: a GPU index), got 'tpu'"
    "--cuda-graph|--device=cpu|--cuda-graph needs a CUDA device (--device cuda)")
  # On a machine without a GPU (no NVIDIA device node), --device cuda says so before anything else.
  if(NOT EXISTS /dev/nvidia0)
    list(APPEND cases
      "--device|cuda|--device cuda: no CUDA GPU is available to this process"
      "--device|cuda:1|--device cuda:1: no CUDA GPU is available to this process")
  endif()
  foreach(case IN LISTS cases)
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 flag)
    list(GET parts 1 value)
    list(GET parts 2 expected)
    execute_process(COMMAND ${FASHION_MNIST} --logdir ${LOGDIR} ${flag} ${value}
      RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT status EQUAL 2)
      message(FATAL_ERROR "fashion_mnist ${flag} ${value} exited with ${status}, expected 2:\n${out}${err}")
    endif()
    expect_in("${out}${err}" "${expected}" "the output of fashion_mnist ${flag} ${value}")
  endforeach()
  # As one of 2 ranks (the variables torchrun sets; refused before joining, so nobody listens at
  # the port): a global batch that 2 ranks cannot split, a bad WORLD_SIZE, --threads 2 on each of
  # 2 ranks of a machine. (The hardware-thread case needs 2 ranks and fewer than 4 threads.)
  set(rank_env "RANK=0,WORLD_SIZE=2,MASTER_ADDR=127.0.0.1,MASTER_PORT=1")
  set(env_cases
    "${rank_env}|--batch-size|33|--batch-size 33 is not a multiple of the 2 ranks training together (WORLD_SIZE 2)"
    "RANK=0,WORLD_SIZE=two|--max-epoch|1|WORLD_SIZE='two' is not a whole number")
  if(cores LESS 4)
    list(APPEND env_cases
      "${rank_env}|--threads|2|--threads: 2 on each of the 2 ranks on this machine (LOCAL_WORLD_SIZE) is more than the ${cores} hardware threads")
  endif()
  foreach(case IN LISTS env_cases)
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 variables)
    string(REPLACE "," ";" variables "${variables}")
    list(GET parts 1 flag)
    list(GET parts 2 value)
    list(GET parts 3 expected)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env ${variables}
                            ${FASHION_MNIST} --logdir ${LOGDIR} ${flag} ${value}
      RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT status EQUAL 2)
      message(FATAL_ERROR "${variables} fashion_mnist ${flag} ${value} exited with ${status}, expected 2:\n${out}${err}")
    endif()
    expect_in("${out}${err}" "${expected}" "the output of ${variables} fashion_mnist ${flag} ${value}")
  endforeach()
  # --oversubscribe lifts the refusal of --threads above the hardware threads: the run goes on to
  # the next check, here the missing dataset (status 2 as well, with the data's message).
  execute_process(COMMAND ${FASHION_MNIST} --logdir ${LOGDIR} --threads ${too_many} --oversubscribe
                          --data /nonexistent
    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 2)
    message(FATAL_ERROR "fashion_mnist --threads ${too_many} --oversubscribe --data /nonexistent exited with ${status}, expected 2:\n${out}${err}")
  endif()
  expect_in("${out}${err}" "Fashion-MNIST file /nonexistent/train-images-idx3-ubyte.gz is missing"
            "the output of fashion_mnist --threads ${too_many} --oversubscribe")
  string(FIND "${out}${err}" "hardware threads" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "--oversubscribe did not lift the --threads refusal:\n${out}${err}")
  endif()
  if(EXISTS ${LOGDIR})
    message(FATAL_ERROR "fashion_mnist created ${LOGDIR} although its flags were refused")
  endif()
  return()
endif()

if(MODE STREQUAL "missing_data")
  execute_process(COMMAND ${FASHION_MNIST} --data /nonexistent --logdir ${LOGDIR}
    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(status EQUAL 0)
    message(FATAL_ERROR "fashion_mnist --data /nonexistent exited with status 0")
  endif()
  expect_in("${err}" "Fashion-MNIST file /nonexistent/train-images-idx3-ubyte.gz is missing"
            "stderr")
  expect_in("${err}" "Debian package dataset-fashion-mnist" "stderr")
  expect_in("${err}" "apt-get install dataset-fashion-mnist" "stderr")
  if(EXISTS ${LOGDIR})
    message(FATAL_ERROR "fashion_mnist created ${LOGDIR} although it had no data")
  endif()
  return()
endif()

set(precision_flags)
if(MODE STREQUAL "smoke_bf16")
  set(precision_flags --precision bf16)
elseif(NOT MODE STREQUAL "smoke")
  message(FATAL_ERROR "smoke_test.cmake: unknown MODE '${MODE}'")
endif()

# 300 training images in batches of 64: 4 steps per epoch; 200 test images in batches of 64:
# 4 validation batches (the last one of 8). With 2 epochs the schedule is lr until epoch 1 ends,
# then lr/10.
execute_process(
  COMMAND ${FASHION_MNIST} --train-limit 300 --val-limit 200 --batch-size 64 --val-batch-size 64
          --max-epoch 2 --steps-per-epoch 4 --lr 0.05 --threads 1 --max-val-error 1
          --logdir ${LOGDIR} ${precision_flags}
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "fashion_mnist exited with status ${status}")
endif()

if(NOT EXISTS ${LOGDIR}/stats.json)
  message(FATAL_ERROR "fashion_mnist did not write ${LOGDIR}/stats.json")
endif()
file(READ ${LOGDIR}/stats.json stats)
string(JSON entries LENGTH "${stats}")
if(NOT entries EQUAL 2)
  message(FATAL_ERROR "stats.json should have 2 entries (one per epoch), has ${entries}:\n${stats}")
endif()
foreach(index 0 1)
  math(EXPR epoch "${index} + 1")
  math(EXPR step "4 * ${epoch}")
  stat(epoch_num "${stats}" ${index} epoch_num)
  stat(global_step "${stats}" ${index} global_step)
  if(NOT epoch_num EQUAL epoch OR NOT global_step EQUAL step)
    message(FATAL_ERROR "stats.json entry ${index}: epoch_num ${epoch_num}, global_step "
                        "${global_step}; expected ${epoch} and ${step}")
  endif()
  foreach(key val-error-top1 val-error-top5)
    stat(value "${stats}" ${index} ${key})
    if(value LESS 0 OR value GREATER 1)
      message(FATAL_ERROR "stats.json entry ${index}: ${key} = ${value} is not a rate")
    endif()
  endforeach()
  foreach(key validation_cost cost train-error-top1 train-error-top5
              "Throughput (samples/sec)")
    stat(value "${stats}" ${index} "${key}")
  endforeach()
endforeach()
stat(lr1 "${stats}" 0 learning_rate)
stat(lr2 "${stats}" 1 learning_rate)
if(NOT lr1 EQUAL 0.05 OR NOT lr2 EQUAL 0.005)
  message(FATAL_ERROR "learning_rate per epoch: ${lr1}, ${lr2}; expected 0.05, 0.005")
endif()

file(READ ${LOGDIR}/log.log log)
expect_in("${log}" "BLAS library loaded: " "log.log")
# The malloc settings line: the fixed thresholds, or (under ASan/TSan, whose allocator refuses
# mallopt) the program saying that it kept the defaults.
if(NOT log MATCHES "Malloc: glibc malloc, (mallopt M_MMAP_THRESHOLD|default thresholds \\(mallopt refused)")
  message(FATAL_ERROR "log.log lacks the 'Malloc: glibc malloc, ...' settings line:\n${log}")
endif()
expect_in("${log}" "OMP_WAIT_POLICY: " "log.log")
if(MODE STREQUAL "smoke_bf16")
  expect_in("${log}" "Precision: bfloat16 (autocast on cpu; " "log.log")
else()
  expect_in("${log}" "Precision: float32 (no autocast)" "log.log")
endif()
expect_in("${log}" "[InferenceRunner] Will eval 4 iterations" "log.log")
expect_in("${log}" "final val-error-top1" "log.log")
expect_in("${log}" "on 200 test images" "log.log")
expect_in("${log}" "fashion_mnist: OK" "log.log")
expect_in("${log}" "no checkpoint in ${LOGDIR}; training starts at step 0." "log.log")
expect_in("${log}" "Model saved to ${LOGDIR}/model-8." "log.log")
foreach(file model-4.data model-8.data min-val-error-top1.data checkpoint)
  if(NOT EXISTS ${LOGDIR}/${file})
    message(FATAL_ERROR "fashion_mnist did not write ${LOGDIR}/${file}")
  endif()
endforeach()
# A checkpoint is one file (checkpoint format 2): no `.index` beside it.
file(GLOB index_files ${LOGDIR}/*.index)
if(index_files)
  message(FATAL_ERROR "fashion_mnist wrote format-1 index files: ${index_files}")
endif()
file(STRINGS ${LOGDIR}/checkpoint index)
list(GET index 0 latest)
if(NOT latest STREQUAL "model_checkpoint_path: \"model-8\"")
  message(FATAL_ERROR "${LOGDIR}/checkpoint should name model-8 first:\n${index}")
endif()
file(GLOB events ${LOGDIR}/events.out.tfevents.*)
list(LENGTH events n_events)
if(NOT n_events EQUAL 1)
  message(FATAL_ERROR "expected one event file in ${LOGDIR}, found ${n_events}: ${events}")
endif()
