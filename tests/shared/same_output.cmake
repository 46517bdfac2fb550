# cmake -DC_SAMPLE=... -DMONO=... -DCS_SAMPLE=... -DMODEL=... -P same_output.cmake
# Runs the C sample and the C# sample on MODEL (100 tokens, seed 7) and fails unless both exit 0
# and print the same text.
execute_process(COMMAND ${C_SAMPLE} ${MODEL} 100 7 RESULT_VARIABLE c_rc OUTPUT_VARIABLE c_out ERROR_VARIABLE c_err)
execute_process(COMMAND ${MONO} ${CS_SAMPLE} ${MODEL} RESULT_VARIABLE cs_rc OUTPUT_VARIABLE cs_out ERROR_VARIABLE cs_err)
if(NOT c_rc EQUAL 0)
    message(FATAL_ERROR "the C sample failed (${c_rc}): ${c_err}")
endif()
if(NOT cs_rc EQUAL 0)
    message(FATAL_ERROR "the C# sample failed (${cs_rc}): ${cs_err}")
endif()
string(LENGTH "${c_out}" c_len)
if(c_len LESS 100)
    message(FATAL_ERROR "the C sample printed only ${c_len} bytes:\n${c_out}")
endif()
if(NOT c_out STREQUAL cs_out)
    message(FATAL_ERROR "the samples differ.\n--- C:\n${c_out}\n--- C#:\n${cs_out}")
endif()
message(STATUS "the same ${c_len} bytes from C and C#:\n${c_out}")
