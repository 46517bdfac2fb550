/* ======================================================================================== */
/*                                 CUDA IMPLEMENTATION                                      */
/* ======================================================================================== */
#if defined(GPT2_IMPLEMENTATION) && !defined(GPT2__CUDA_IMPLEMENTATION_DONE)
#define GPT2__CUDA_IMPLEMENTATION_DONE
