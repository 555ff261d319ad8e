-- API.md §5: error files carry purpose `batch_output`, as OpenAI's do (`batch_error` is not an
-- OpenAI purpose; strict clients reject it). A batch's error file stays known by its error_file_id.
UPDATE `files` SET `purpose` = 'batch_output' WHERE `purpose` = 'batch_error';
