# tlptm_set_warnings(<target>)
#
# Turns on the project's warnings for one of tlptm's own targets (tests, examples,
# benchmarks). Never applied globally, never to consumers of tlptm::tlptm.
# -Werror is added only when the option TLPTM_WERROR is ON.
function(tlptm_set_warnings target)
    if(MSVC)
        target_compile_options(${target} PRIVATE /W4 $<$<BOOL:${TLPTM_WERROR}>:/WX>)
    else()
        target_compile_options(${target} PRIVATE
            -Wall -Wextra -Wpedantic $<$<BOOL:${TLPTM_WERROR}>:-Werror>)
    endif()
endfunction()
