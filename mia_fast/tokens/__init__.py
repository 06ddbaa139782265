"""From texts to token ids, the first step of the data flow: the start-token rule, sliding windows and rows
(``tokenize``), and a tokenizer's fingerprint (``fingerprint``), which frequency tables and engines record."""
