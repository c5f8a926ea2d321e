# core/tokenizer: build rules (owned by the area)
