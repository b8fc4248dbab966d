-- Databases beside `pipeline` (the dedup index, POSTGRES_DB): Dagster's storage and MLflow's backend store.
CREATE DATABASE dagster OWNER pipeline;
CREATE DATABASE mlflow OWNER pipeline;
