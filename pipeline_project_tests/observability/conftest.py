from pipeline_project_tests.dagster_layer.conftest import instance, layout, resources, s3, uid  # noqa: F401
