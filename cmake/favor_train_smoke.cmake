# The favor_train_smoke test: a short run of examples/favor_train.c for each
# attention method and for causal FAVOR+ with learned gates, on a small version of its task (64 positions, 16 keys and
# values; about 0.2 s per method with AVX2). --check makes favor_train exit
# non-zero when a loss is not finite or the loss did not fall.
#   cmake -DFAVOR_TRAIN=path/to/favor_train [-DFAVOR_EMULATOR="qemu-i386 ..."] \
#         -P cmake/favor_train_smoke.cmake
if(NOT FAVOR_TRAIN)
  message(FATAL_ERROR "favor_train_smoke: pass -DFAVOR_TRAIN=<path of favor_train>")
endif()
separate_arguments(emulator UNIX_COMMAND "${FAVOR_EMULATOR}")
foreach(method softmax elu favor)
  execute_process(COMMAND ${emulator} ${FAVOR_TRAIN} --method ${method} --steps 100 --seq 64
                          --keys 16 --values 16 --features 32 --eval 16 --log 25 --check
                  RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "favor_train_smoke: favor_train --method ${method} failed: ${status}")
  endif()
endforeach()
# learned gates (causal linear attention trained through dL/dg)
execute_process(COMMAND ${emulator} ${FAVOR_TRAIN} --method favor --causal --gates --steps 100
                        --seq 64 --keys 16 --values 16 --features 32 --eval 16 --log 25 --check
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "favor_train_smoke: favor_train --causal --gates failed: ${status}")
endif()
message(STATUS "favor_train_smoke: the loss fell for softmax, elu, favor and gated favor")
