"""Data: tokenizer, toy dataset, collation and batching; manifest/audio front end for real speech."""
