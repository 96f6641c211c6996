#pragma once
// The sequence filters (filters_seq.cpp), registered by find_filter in filters.cpp.
#include "jinja/interpreter.h"

namespace kvscope::jinja {

Value f_first(Interpreter&, const Value& v, Args&);
Value f_last(Interpreter&, const Value& v, Args&);
Value f_join(Interpreter&, const Value& v, Args&);
Value f_list(Interpreter&, const Value& v, Args&);
Value f_items(Interpreter&, const Value& v, Args&);
Value f_dictsort(Interpreter&, const Value& v, Args&);
Value f_map(Interpreter&, const Value& v, Args&);
Value f_select(Interpreter&, const Value& v, Args&);
Value f_reject(Interpreter&, const Value& v, Args&);
Value f_selectattr(Interpreter&, const Value& v, Args&);
Value f_rejectattr(Interpreter&, const Value& v, Args&);
Value f_reverse(Interpreter&, const Value& v, Args&);
Value f_sort(Interpreter&, const Value& v, Args&);
Value f_unique(Interpreter&, const Value& v, Args&);
Value f_sum(Interpreter&, const Value& v, Args&);
Value f_min(Interpreter&, const Value& v, Args&);
Value f_max(Interpreter&, const Value& v, Args&);
Value f_batch(Interpreter&, const Value& v, Args&);

}  // namespace kvscope::jinja
