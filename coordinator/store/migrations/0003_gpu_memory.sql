-- The node's total GPU memory in bytes as its agent reports it (from its
-- config's gpu_memory, else nvidia-smi); 0 is unknown, and placement then
-- skips the memory check for the node rather than exclude it.
ALTER TABLE nodes ADD COLUMN gpu_memory_bytes INTEGER NOT NULL DEFAULT 0;
