/* ======================================================================================== */
/*                                     IMPLEMENTATION                                       */
/* ======================================================================================== */
#if defined(GPT2_IMPLEMENTATION) && !defined(GPT2_IMPLEMENTATION_DONE)
#define GPT2_IMPLEMENTATION_DONE
