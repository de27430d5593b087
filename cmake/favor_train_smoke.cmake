# The favor_train_smoke test: a short run of examples/favor_train.c for each
# attention method and for causal FAVOR+ with learned gates, on a small version of its task (64 positions, 16 keys and
# values, 40 steps; about 0.1 s per method with AVX2, 0.5 s scalar). --check
# makes favor_train exit non-zero when a loss is not finite or the loss did not
# fall. 40 steps, not 100: under ASan (scalar) 100 steps of the four runs took
# 108 s of the Xeon's CI and then over 120 s, the test's timeout; at 40 steps
# every loss has fallen by a quarter or more (scalar, Xeon: softmax 3.12 -> 2.18,
# elu 3.10 -> 2.65, favor 3.15 -> 2.34, gated 3.16 -> 1.96).
#   cmake -DFAVOR_TRAIN=path/to/favor_train [-DFAVOR_EMULATOR="qemu-i386 ..."] \
#         -P cmake/favor_train_smoke.cmake
if(NOT FAVOR_TRAIN)
  message(FATAL_ERROR "favor_train_smoke: pass -DFAVOR_TRAIN=<path of favor_train>")
endif()
separate_arguments(emulator UNIX_COMMAND "${FAVOR_EMULATOR}")
foreach(method softmax elu favor)
  execute_process(COMMAND ${emulator} ${FAVOR_TRAIN} --method ${method} --steps 40 --seq 64
                          --keys 16 --values 16 --features 32 --eval 16 --log 20 --check
                  RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "favor_train_smoke: favor_train --method ${method} failed: ${status}")
  endif()
endforeach()
# learned gates (causal linear attention trained through dL/dg)
execute_process(COMMAND ${emulator} ${FAVOR_TRAIN} --method favor --causal --gates --steps 40
                        --seq 64 --keys 16 --values 16 --features 32 --eval 16 --log 20 --check
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "favor_train_smoke: favor_train --causal --gates failed: ${status}")
endif()
message(STATUS "favor_train_smoke: the loss fell for softmax, elu, favor and gated favor")
